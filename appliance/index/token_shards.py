"""Token-vector shards of a version: which shards its rows point into, and the new shard a build writes.

Shards are shared between versions and never change once published; a version's `token_refs` row is (shard,
start, count). New rows go into one new shard, which also takes in the live rows of the shards that
`shards_to_merge` picks. The build that first trains a partition's codebook re-codes every shard into it.
"""
from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from ..config import IndexSettings
from ..paths import fsync_dir
from .snapshot import PartitionSnapshot, shard_files
from .tokens import INT8, RESIDUAL, Codebook, quantize, train_codebook

_COMPACT_BELOW = 0.5  # rewrite token shards into one when less than half of their rows are still live
_BLOCK_TOKENS = 65_536  # tokens widened to float32 at a time while coding (~100 MB with the residuals)


@dataclass(slots=True)
class TokenRefs:
    """What a version's manifest says of its token vectors."""
    shards: list[int]
    codec: str
    codebook: str | None  # the codebook file under tokens/ (residual codec only)

    def manifest(self) -> dict:
        fields = {"token_shards": self.shards, "token_codec": self.codec}
        return fields | ({"token_codebook": self.codebook} if self.codebook else {})


def needs_recoding(snapshot: PartitionSnapshot, params: IndexSettings) -> bool:
    """The version keeps int8 token vectors past `codebook_min_tokens` that the settings would store as residuals
    (a partition from before the codec, or kept as int8 by an earlier setting): `appliance reindex --tokens`."""
    return (snapshot.has_token_vectors and snapshot.codebook is None and params.token_codec == RESIDUAL
            and snapshot.token_count >= params.codebook_min_tokens)


def write_token_refs(tmp: Path, partition_dir: Path, previous: PartitionSnapshot | None, old_rows: np.ndarray,
                     new_vectors: list[np.ndarray], params: IndexSettings, recode: bool = False) -> TokenRefs:
    """Write the version's token_refs.npy (and the new shard, and a codebook if this build trains one).

    A codebook is trained when the partition reaches `codebook_min_tokens` in this build (its first build, or the
    one that crosses the threshold: re-coding what it had is then cheap), or when asked (`recode`: a big int8
    partition, whose re-coding takes minutes, is never re-coded by an ordinary ingest or a boot's catch-up)."""
    tokens = partition_dir / "tokens"
    refs = (np.asarray(previous.token_refs)[old_rows].astype(np.int64) if previous is not None and previous.size
            else np.zeros((0, 3), np.int64))
    codec = previous.token_codec if previous is not None else INT8
    codebook = previous.codebook if previous is not None else None
    name = previous.manifest.get("token_codebook") if codebook is not None else None
    shards = sorted({int(s) for s in refs[:, 0]})  # oldest first: shard numbers only grow
    new_count = sum(len(v) for v in new_vectors)
    number = _next_number(tokens)
    had = previous.token_count if previous is not None else 0
    reaches = int(refs[:, 2].sum()) + new_count >= params.codebook_min_tokens
    recode = codebook is None and params.token_codec == RESIDUAL and reaches and (
        recode or had < params.codebook_min_tokens)
    if recode:
        sample = _training_sample(previous, old_rows, new_vectors, params.codebook_sample)
        codebook = train_codebook(sample, params.codebook_centroids, params.token_bits)
        codec, name = RESIDUAL, f"codebook-{number:06d}.npz"
        codebook.save(tokens / name)
    live = [int(refs[refs[:, 0] == s, 2].sum()) for s in shards]
    total_rows = sum(len(previous.token_shards[s][1]) for s in shards)
    merged = len(shards) if recode else shards_to_merge(live, total_rows, new_count, max(1, params.max_token_shards))
    move = np.isin(refs[:, 0], shards[len(shards) - merged:])
    pieces, lengths = _moved(previous, old_rows[move], codebook if recode else None)
    for piece, length in _encoded(new_vectors, codebook):
        pieces.append(piece)
        lengths.extend(length)
    shards = shards[:len(shards) - merged]
    if lengths:
        starts = np.concatenate([[0], np.cumsum(lengths)[:-1]])
        block = np.stack([np.full(len(lengths), number), starts, np.asarray(lengths)], axis=1).astype(np.int64)
        moved = int(move.sum())
        refs[move] = block[:moved]
        refs = np.concatenate([refs, block[moved:]])
        arrays = (np.concatenate([p[0] for p in pieces]), np.concatenate([p[1] for p in pieces]))
        for target, array in zip(shard_files(tokens, number, codec), arrays):
            _publish(target, array)
        shards.append(number)
    fsync_dir(tokens)
    with open(tmp / "token_refs.npy", "wb") as f:
        np.save(f, refs.reshape(-1, 3).astype(np.int64))
    return TokenRefs(shards, codec, name)


def _moved(previous: PartitionSnapshot | None, rows: np.ndarray, recode_into: Codebook | None
           ) -> tuple[list[tuple[np.ndarray, np.ndarray]], list[int]]:
    """The moved rows' token vectors as the new shard stores them: copied as they are, or (`recode_into`) decoded
    a block at a time and coded with the new codebook."""
    if previous is None or not len(rows):
        return [], []
    if recode_into is None:
        codes = previous.token_codes(rows)
        return [(codes.first, codes.second)], [int(n) for n in codes.lengths]
    pieces, lengths = [], []
    counts = np.asarray(previous.token_refs)[rows, 2]
    for start, end in _token_blocks(counts):
        block = previous.token_vectors(rows[start:end])
        pieces.append(recode_into.encode(block.vectors))
        lengths.extend(int(n) for n in block.lengths)
    return pieces, lengths


def _encoded(new_vectors: list[np.ndarray], codebook: Codebook | None):
    """The new rows' pieces and their token counts: residual pieces of about `_BLOCK_TOKENS` tokens (a big first
    ingest is not widened to float32 all at once), or an int8 piece per row."""
    if codebook is None:
        for vectors in new_vectors:
            yield quantize(vectors), [len(vectors)]
        return
    for start, end in _token_blocks([len(v) for v in new_vectors]):
        rows = new_vectors[start:end]
        yield codebook.encode(np.concatenate(rows).astype(np.float32)), [len(v) for v in rows]


def _token_blocks(counts) -> list[tuple[int, int]]:
    """Consecutive row ranges of about `_BLOCK_TOKENS` tokens each (at least one row)."""
    ends = np.cumsum(np.asarray(counts, np.int64))
    blocks, start = [], 0
    while start < len(ends):
        base = ends[start - 1] if start else 0
        end = max(start + 1, int(np.searchsorted(ends, base + _BLOCK_TOKENS, side="right")))
        blocks.append((start, end))
        start = end
    return blocks


def _training_sample(previous: PartitionSnapshot | None, old_rows: np.ndarray, new_vectors: list[np.ndarray],
                     limit: int, seed: int = 0) -> np.ndarray:
    """Up to `limit` token vectors of random rows of the whole partition, kept (decoded) and new alike, so a
    codebook trained on a big old partition does not see only today's ingest. Rows are drawn before anything is
    widened to float32: a first ingest of a million tokens does not take gigabytes for this."""
    rng = np.random.default_rng(seed)
    kept = len(old_rows) if previous is not None else 0
    per_row = max(1.0, (previous.token_count / max(previous.size, 1)) if kept else
                  sum(len(v) for v in new_vectors) / max(len(new_vectors), 1))
    chosen = rng.permutation(kept + len(new_vectors))[: int(limit / per_row) + 1]
    parts = [new_vectors[i - kept].astype(np.float32) for i in chosen if i >= kept]
    old = np.sort(old_rows[chosen[chosen < kept]]) if kept else np.zeros(0, np.int64)
    if len(old):
        parts.append(previous.token_vectors(old).vectors)
    sample = np.concatenate(parts) if parts else np.zeros((0, 1), np.float32)
    if len(sample) > limit:
        sample = sample[rng.choice(len(sample), limit, replace=False)]
    return sample


def shards_to_merge(live: list[int], total_rows: int, new_rows: int, max_shards: int) -> int:
    """How many of the youngest shards (`live`: their live rows, oldest first) the new shard takes in.

    A shard is two mmaps, so two open files, per open version: pure additions would add one per version without
    bound. As in an LSM tree, the new shard takes the youngest shards while they are at most twice its size (a
    row's shard then grows 1.5x per copy: O(log n) copies per row, geometric sizes) and while the version would
    reference more than `max_shards` (that cap binds only past ~2^max_shards times the smallest; at 8, a million
    one-chunk ingests copy each row ~30 times in a simulation). All move when less than half of their rows are
    live (deletes).
    """
    if live and sum(live) < _COMPACT_BELOW * total_rows:
        return len(live)
    merged, size = 0, new_rows
    while merged < len(live) and (len(live) - merged + (size > 0) > max_shards or live[-1 - merged] <= 2 * size):
        size += live[-1 - merged]
        merged += 1
    return merged


def _next_number(tokens: Path) -> int:
    """Shard and codebook numbers only grow, over both codecs' files: a name is never reused."""
    used = [int(p.stem[1:]) for pattern in ("q*.npy", "c*.npy") for p in tokens.glob(pattern)
            if p.stem[1:].isdigit()]
    used += [int(p.stem.split("-")[1]) for p in tokens.glob("codebook-*.npz") if p.stem.split("-")[1].isdigit()]
    return 1 + max(used + [0])


def _publish(target: Path, array: np.ndarray) -> None:
    """Write beside the target, fsync, rename: after a crash the name holds all of the array or does not exist.
    The caller fsyncs the folder."""
    part = target.with_suffix(".part")
    with open(part, "wb") as f:
        np.save(f, array)
        f.flush()
        os.fsync(f.fileno())
    os.replace(part, target)
