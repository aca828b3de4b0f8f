"""Build the next version of a partition index from the current one plus a delta, and publish it atomically.

A version folder is written completely under a temporary name, fsynced, renamed into place, and only then does
the CURRENT pointer move (temp file + rename). Token shards, shared between versions, are published the same way
(.part, fsync, rename, fsync of tokens/) before the version that uses them. A crash at any point leaves the
previous version current and intact; boot compares it with the store and builds the missing delta again, and a
failed build (a full disk) removes what it wrote.
"""
from __future__ import annotations

import contextlib
import dataclasses
import json
import os
import shutil
import time
import uuid
from dataclasses import dataclass
from pathlib import Path

import bm25s
import numpy as np
from usearch.index import Index

from ..config import IndexSettings
from ..paths import fsync_dir
from ..store import Place
from .snapshot import CURRENT, FORMAT, PartitionSnapshot, current_version, quantize, shard_files

_COMPACT_BELOW = 0.5  # rewrite token shards into one when less than half of their rows are still live


@dataclass(slots=True)
class NewChunks:
    """Chunks to add, with their document fields and vectors. Arrays are aligned with chunk_ids."""
    chunk_ids: np.ndarray
    ordinals: np.ndarray
    texts: list[str]
    docs: list[dict]  # per chunk: key, title, source, metadata, file
    dense: np.ndarray  # (n, dim)
    tokens: list[np.ndarray] | None
    places: list[Place] | None = None  # per chunk (page, section); None: none has one

    @classmethod
    def empty(cls, dim: int, with_tokens: bool) -> "NewChunks":
        tokens = [] if with_tokens else None
        return cls(np.zeros(0, np.int64), np.zeros(0, np.int32), [], [], np.zeros((0, dim), np.float32), tokens)


def build_version(partition_dir: Path, partition_id: int, store_version: int, encoder: str, dim: int,
                  previous: PartitionSnapshot | None, removed: np.ndarray, added: NewChunks,
                  params: IndexSettings, tokenize, language: str = "") -> PartitionSnapshot:
    """Write a new version = previous - removed + added, make it current, and return it opened. `language` is the
    partition's (what picked `encoder`), recorded with the version."""
    partition_dir = Path(partition_dir)
    (partition_dir / "tokens").mkdir(parents=True, exist_ok=True)
    in_use = previous
    if previous is not None and (previous.encoder != encoder or previous.dim != dim):
        previous = None  # the encoder changed: nothing carries over (reindex re-encodes everything)

    keep = np.ones(0, bool)
    if previous is not None and previous.size:
        keep = ~np.isin(np.asarray(previous.chunk_ids), removed)
    old_rows = np.flatnonzero(keep)
    order = np.argsort(added.chunk_ids, kind="stable")

    name = f"v{store_version:08d}-{uuid.uuid4().hex[:8]}"
    tmp = partition_dir / f".tmp-{name}"
    try:
        tmp.mkdir()
        count = _write_rows(tmp, previous, old_rows, removed, added, order, params, dim, tokenize)
        manifest = {
            "format": FORMAT, "partition_id": partition_id, "store_version": store_version, "encoder": encoder,
            "language": language, "dim": dim, "count": count, "created_at": time.time(),
            "params": dataclasses.asdict(params),
            "token_vectors": added.tokens is not None and (previous is None or previous.has_token_vectors),
        }
        if manifest["token_vectors"]:
            manifest["token_shards"] = _write_token_refs(tmp, partition_dir, previous, old_rows, added, order,
                                                         max(1, params.max_token_shards))
        (tmp / "manifest.json").write_text(json.dumps(manifest, indent=1))
        _fsync_tree(tmp)
        final = partition_dir / name
        os.rename(tmp, final)
        fsync_dir(partition_dir)
        _point_current(partition_dir, name)
    except BaseException:
        # A full disk (or any failure) must not leave files behind: this build's folder, shards and .part files go;
        # whatever CURRENT or the caller's snapshot uses stays.
        with contextlib.suppress(Exception):
            collect_garbage(partition_dir, keep=in_use)
        raise
    snapshot = PartitionSnapshot(final, params.expansion_search)
    with contextlib.suppress(OSError):  # published: a cleanup that fails now is retried by the next build or boot
        collect_garbage(partition_dir)
    return snapshot


def _write_rows(tmp: Path, previous, old_rows, removed, added: NewChunks, order, params: IndexSettings, dim: int,
                tokenize) -> int:
    """Write the rows (surviving old rows, already in chunk-id order, then the new ones in chunk-id order) with
    their fields, HNSW and BM25 into the version folder; returns how many rows it has."""
    docs, doc_index = _merge_docs(previous, old_rows, [added.docs[i] for i in order])
    chunk_ids = np.concatenate([_take(previous, "chunk_ids", old_rows, np.int64), added.chunk_ids[order]])
    if len(chunk_ids) > 1 and np.any(np.diff(chunk_ids) <= 0):
        raise ValueError("chunk ids must be unique and newer than the indexed ones")
    ordinals = np.concatenate([_take(previous, "ordinals", old_rows, np.int32),
                               added.ordinals[order].astype(np.int32)])
    texts = [previous.text(int(r)) for r in old_rows] if previous is not None else []
    texts += [added.texts[i] for i in order]
    dense = np.concatenate([
        _take(previous, "dense", old_rows, np.float16).reshape(-1, dim),
        added.dense[order].astype(np.float16).reshape(-1, dim),
    ])
    for file, array in (("chunk_ids", chunk_ids), ("doc_index", doc_index), ("ordinals", ordinals),
                        ("dense", dense)):
        _save(tmp / f"{file}.npy", array)
    _write_texts(tmp, texts)
    _write_places(tmp, previous, old_rows, [added.places[i] for i in order] if added.places else [Place()] * len(order))
    (tmp / "docs.json").write_text(json.dumps(docs, ensure_ascii=False), encoding="utf-8")
    if len(chunk_ids):
        _build_hnsw(tmp / "hnsw.usearch", previous, removed, chunk_ids, dense, added, order, params, dim)
        _build_bm25(tmp / "bm25", [f"{docs[d]['title']}\n{t}" for d, t in zip(doc_index, texts)], tokenize)
    return int(len(chunk_ids))


def _build_bm25(folder: Path, texts: list[str], tokenize) -> None:
    corpus = tokenize(texts)
    if any(corpus):  # bm25s cannot index an empty vocabulary ("!!!", only stop words): vectors only then
        retriever = bm25s.BM25()
        retriever.index(corpus, show_progress=False)
        retriever.save(str(folder))


def collect_garbage(partition_dir: Path, keep: PartitionSnapshot | None = None) -> None:
    """Remove what neither the current version nor `keep` (a version still in use) needs: older versions, their
    token shards, and what builds that failed or were cut short left (.tmp-* folders, .part files, a CURRENT temp).
    Open snapshots keep their mmaps."""
    partition_dir = Path(partition_dir)
    for entry in partition_dir.glob(".tmp-*"):
        shutil.rmtree(entry, ignore_errors=True)
    (partition_dir / f".{CURRENT}.tmp").unlink(missing_ok=True)
    tokens = partition_dir / "tokens"
    for path in tokens.glob("*.part"):
        path.unlink(missing_ok=True)
    current = current_version(partition_dir)
    if current is None:
        return
    used = [json.loads((current / "manifest.json").read_text())] + ([keep.manifest] if keep is not None else [])
    kept = {current} | ({keep.folder} if keep is not None else set())
    for entry in partition_dir.iterdir():
        if entry.is_dir() and entry.name.startswith("v") and entry not in kept:
            shutil.rmtree(entry, ignore_errors=True)
    live = {path for manifest in used for shard in manifest.get("token_shards", [])
            for path in shard_files(tokens, shard)}
    for path in tokens.glob("*.npy"):
        if path not in live:
            path.unlink(missing_ok=True)


def _build_hnsw(path: Path, previous, removed, chunk_ids, dense, added: NewChunks, order, params, dim) -> None:
    reuse = previous is not None and previous.size and previous.hnsw is not None
    if reuse:
        dropped = int(np.isin(np.asarray(previous.chunk_ids), removed).sum())
        reuse = dropped <= 0.2 * previous.size  # past that, a fresh graph is both smaller and better
    if reuse:
        index = Index.restore(str(previous.folder / "hnsw.usearch"))  # a private, writable copy
        gone = np.asarray(removed, dtype=np.uint64)
        if len(gone):
            index.remove(gone[np.isin(gone, np.asarray(previous.chunk_ids, dtype=np.uint64))])
        if len(added.chunk_ids):
            index.add(added.chunk_ids[order].astype(np.uint64), added.dense[order].astype(np.float32))
    else:
        index = Index(ndim=dim, metric=params.metric, dtype=params.dtype, connectivity=params.connectivity,
                      expansion_add=params.expansion_add, expansion_search=params.expansion_search)
        index.add(chunk_ids.astype(np.uint64), dense.astype(np.float32))
    index.save(str(path))


def _write_token_refs(tmp: Path, partition_dir: Path, previous, old_rows, added: NewChunks, order,
                      max_shards: int) -> list[int]:
    """Token vectors of kept rows stay in their shards; new rows go to one new shard (int8 codes + scales), which
    also takes the live rows of the shards `_shards_to_merge` picks."""
    refs = (np.asarray(previous.token_refs)[old_rows] if previous is not None and previous.size
            else np.zeros((0, 3), np.int64))
    shards = sorted({int(s) for s in refs[:, 0]})  # oldest first: shard numbers only grow
    live = [int(refs[refs[:, 0] == s, 2].sum()) for s in shards]
    total_rows = sum(len(previous.token_shards[s][1]) for s in shards)
    pieces = [quantize(added.tokens[i]) for i in order]
    merged = _shards_to_merge(live, total_rows, sum(len(c) for c, _ in pieces), max_shards)
    move = np.isin(refs[:, 0], shards[len(shards) - merged:])
    if move.any():  # live rows of the merged shards move into the new one, ahead of the new rows
        kept_codes, kept_scales, kept_lengths = previous.token_vectors(old_rows[move])
        pieces.insert(0, (kept_codes, kept_scales))
        lengths = list(kept_lengths) + [len(c) for c, _ in pieces[1:]]
    else:
        lengths = [len(c) for c, _ in pieces]
    shards = shards[:len(shards) - merged]
    if lengths:
        tokens = partition_dir / "tokens"
        shard = 1 + max([int(p.stem[1:]) for p in tokens.glob("q*.npy")] + [0])
        starts = np.concatenate([[0], np.cumsum(lengths)[:-1]])
        block = np.stack([np.full(len(lengths), shard), starts, np.asarray(lengths)], axis=1).astype(np.int64)
        moved = int(move.sum())
        refs = refs.astype(np.int64)
        refs[move] = block[:moved]
        refs = np.concatenate([refs, block[moved:]])
        for target, array in zip(shard_files(tokens, shard), (np.concatenate([c for c, _ in pieces]),
                                                                np.concatenate([s for _, s in pieces]))):
            _publish(target, array)
        fsync_dir(tokens)
        shards.append(shard)
    _save(tmp / "token_refs.npy", refs.reshape(-1, 3).astype(np.int64))
    return shards


def _shards_to_merge(live: list[int], total_rows: int, new_rows: int, max_shards: int) -> int:
    """How many of the youngest shards (`live`: their live rows, oldest first) the new shard takes in.

    A shard is two mmaps (codes, scales), so two open files, per open version: pure additions would add one per
    version without bound. As in an LSM tree, the new shard takes the youngest shards while they are at most twice
    its size (a row's shard then grows 1.5x per copy: O(log n) copies per row, geometric sizes) and while the
    version would reference more than `max_shards` (that cap binds only past ~2^max_shards times the smallest; at 8,
    a million one-chunk ingests copy each row ~30 times in a simulation). All move when less than half of their
    rows are live (deletes).
    """
    if live and sum(live) < _COMPACT_BELOW * total_rows:
        return len(live)
    merged, size = 0, new_rows
    while merged < len(live) and (len(live) - merged + (size > 0) > max_shards or live[-1 - merged] <= 2 * size):
        size += live[-1 - merged]
        merged += 1
    return merged


def _merge_docs(previous, old_rows, new_docs: list[dict]) -> tuple[list[dict], np.ndarray]:
    docs: list[dict] = []
    position: dict[str, int] = {}
    index = np.zeros(len(old_rows) + len(new_docs), np.int32)
    fresh = {d["key"]: d for d in new_docs}  # an updated document's new fields win
    for i, row in enumerate(old_rows):
        doc = previous.docs[int(previous.doc_index[row])]
        index[i] = _doc_slot(fresh.get(doc["key"], doc), docs, position)
    for j, doc in enumerate(new_docs):
        index[len(old_rows) + j] = _doc_slot(doc, docs, position)
    return docs, index


def _doc_slot(doc: dict, docs: list[dict], position: dict[str, int]) -> int:
    slot = position.get(doc["key"])
    if slot is None:
        slot = position[doc["key"]] = len(docs)
        docs.append(doc)
    return slot


def _take(previous, field: str, rows: np.ndarray, dtype) -> np.ndarray:
    if previous is None or not previous.size:
        return np.zeros((0,), dtype)
    return np.asarray(getattr(previous, field)[rows]).astype(dtype)


def _write_places(folder: Path, previous, old_rows, new_places: list[Place]) -> None:
    """Pages as an (n, 2) int32 array (0 = none) and heading paths once each, with a per-row index (-1 = none):
    a million rows cost 12 MB, not a million Python lists."""
    paths = [previous.section(int(r)) for r in old_rows] if previous is not None else []
    paths += [p.section for p in new_places]
    unique: dict[tuple[str, ...], int] = {}
    index = np.asarray([unique.setdefault(path, len(unique)) if path else -1 for path in paths], np.int32)
    new_pages = np.asarray([[p.page or 0, p.page_end or 0] for p in new_places], np.int32).reshape(-1, 2)
    pages = np.concatenate([_take(previous, "pages", old_rows, np.int32).reshape(-1, 2), new_pages])
    _save(folder / "pages.npy", pages)
    _save(folder / "section_index.npy", index)
    (folder / "sections.json").write_text(json.dumps([list(path) for path in unique], ensure_ascii=False),
                                          encoding="utf-8")


def _write_texts(folder: Path, texts: list[str]) -> None:
    encoded = [t.encode("utf-8") for t in texts]
    offsets = np.zeros(len(encoded) + 1, np.int64)
    offsets[1:] = np.cumsum([len(b) for b in encoded])
    (folder / "texts.bin").write_bytes(b"".join(encoded))
    _save(folder / "text_offsets.npy", offsets)


def _save(path: Path, array: np.ndarray) -> None:
    with open(path, "wb") as f:
        np.save(f, array)


def _publish(target: Path, array: np.ndarray) -> None:
    """Write beside the target, fsync, rename: after a crash the name holds all of the array or does not exist.
    The caller fsyncs the folder."""
    part = target.with_suffix(".part")
    with open(part, "wb") as f:
        np.save(f, array)
        f.flush()
        os.fsync(f.fileno())
    os.replace(part, target)


def _point_current(partition_dir: Path, name: str) -> None:
    tmp = partition_dir / f".{CURRENT}.tmp"
    with open(tmp, "w") as f:
        f.write(name)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, partition_dir / CURRENT)
    fsync_dir(partition_dir)


def _fsync_tree(folder: Path) -> None:
    for path in folder.rglob("*"):
        if path.is_file():
            fd = os.open(path, os.O_RDONLY)
            try:
                os.fsync(fd)
            finally:
                os.close(fd)
    for path in [folder, *[p for p in folder.rglob("*") if p.is_dir()]]:
        fsync_dir(path)
