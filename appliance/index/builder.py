"""Build the next version of a partition index from the current one plus a delta, and publish it atomically.

A version folder is written completely under a temporary name, fsynced, renamed into place, and only then does
the CURRENT pointer move (temp file + rename). A crash at any point leaves the previous version current and
intact; boot compares it with the store and builds the missing delta again.
"""
from __future__ import annotations

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
from .snapshot import CURRENT, FORMAT, PartitionSnapshot, current_version, quantize, shard_files

_COMPACT_BELOW = 0.5  # rewrite token shards into one when less than half of their rows are still live


@dataclass(slots=True)
class NewChunks:
    """Chunks to add, with their document fields and vectors. Arrays are aligned with chunk_ids."""
    chunk_ids: np.ndarray
    ordinals: np.ndarray
    texts: list[str]
    docs: list[dict]  # per chunk: key, title, source, metadata
    dense: np.ndarray  # (n, dim)
    tokens: list[np.ndarray] | None

    @classmethod
    def empty(cls, dim: int, with_tokens: bool) -> "NewChunks":
        tokens = [] if with_tokens else None
        return cls(np.zeros(0, np.int64), np.zeros(0, np.int32), [], [], np.zeros((0, dim), np.float32), tokens)


def build_version(partition_dir: Path, partition_id: int, store_version: int, encoder: str, dim: int,
                  previous: PartitionSnapshot | None, removed: np.ndarray, added: NewChunks,
                  params: IndexSettings, tokenize) -> PartitionSnapshot:
    """Write a new version = previous - removed + added, make it current, and return it opened."""
    partition_dir = Path(partition_dir)
    partition_dir.mkdir(parents=True, exist_ok=True)
    (partition_dir / "tokens").mkdir(exist_ok=True)
    if previous is not None and (previous.encoder != encoder or previous.dim != dim):
        previous = None  # the encoder changed: nothing carries over (reindex re-encodes everything)

    keep = np.ones(0, bool)
    if previous is not None and previous.size:
        keep = ~np.isin(np.asarray(previous.chunk_ids), removed)
    old_rows = np.flatnonzero(keep)
    order = np.argsort(added.chunk_ids, kind="stable")

    name = f"v{store_version:08d}-{uuid.uuid4().hex[:8]}"
    tmp = partition_dir / f".tmp-{name}"
    tmp.mkdir()
    try:
        # Rows: surviving old rows (already in chunk-id order), then the new ones in chunk-id order.
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
        _save(tmp / "chunk_ids.npy", chunk_ids)
        _save(tmp / "doc_index.npy", doc_index)
        _save(tmp / "ordinals.npy", ordinals)
        _save(tmp / "dense.npy", dense)
        _write_texts(tmp, texts)
        (tmp / "docs.json").write_text(json.dumps(docs, ensure_ascii=False), encoding="utf-8")
        if len(chunk_ids):
            _build_hnsw(tmp / "hnsw.usearch", previous, removed, chunk_ids, dense, added, order, params, dim)
            index_texts = [f"{docs[d]['title']}\n{t}" for d, t in zip(doc_index, texts)]
            corpus = tokenize(index_texts)
            if any(corpus):  # bm25s cannot index an empty vocabulary ("!!!", only stop words): vectors only then
                retriever = bm25s.BM25()
                retriever.index(corpus, show_progress=False)
                retriever.save(str(tmp / "bm25"))
        manifest = {
            "format": FORMAT, "partition_id": partition_id, "store_version": store_version, "encoder": encoder,
            "dim": dim,
            "count": int(len(chunk_ids)), "created_at": time.time(), "params": dataclasses.asdict(params),
            "token_vectors": added.tokens is not None and (previous is None or previous.has_token_vectors),
        }
        if manifest["token_vectors"]:
            manifest["token_shards"] = _write_token_refs(tmp, partition_dir, previous, old_rows, added, order)
        (tmp / "manifest.json").write_text(json.dumps(manifest, indent=1))
        _fsync_tree(tmp)
        final = partition_dir / name
        os.rename(tmp, final)
        _fsync_dir(partition_dir)
        _point_current(partition_dir, name)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    snapshot = PartitionSnapshot(final, params.expansion_search)
    collect_garbage(partition_dir)
    return snapshot


def collect_garbage(partition_dir: Path) -> None:
    """Remove versions and token shards the current version does not use. Open snapshots keep their mmaps."""
    current = current_version(partition_dir)
    if current is None:
        return
    for entry in partition_dir.iterdir():
        if entry.is_dir() and entry.name.startswith(("v", ".tmp-")) and entry != current:
            shutil.rmtree(entry, ignore_errors=True)
    manifest = json.loads((current / "manifest.json").read_text())
    tokens = partition_dir / "tokens"
    live = {path for shard in manifest.get("token_shards", []) for path in shard_files(tokens, shard)}
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


def _write_token_refs(tmp: Path, partition_dir: Path, previous, old_rows, added: NewChunks, order) -> list[int]:
    """Token vectors of kept rows stay in their shards; new rows go to one new shard (int8 codes + scales)."""
    tokens = partition_dir / "tokens"
    refs = (np.asarray(previous.token_refs)[old_rows] if previous is not None and previous.size
            else np.zeros((0, 3), np.int64))
    shards = sorted({int(s) for s in refs[:, 0]}) if len(refs) else []
    live_rows = int(refs[:, 2].sum()) if len(refs) else 0
    total_rows = sum(len(previous.token_shards[s][1]) for s in shards) if shards else 0
    codes, scales, lengths = [], [], []
    if shards and live_rows < _COMPACT_BELOW * total_rows:
        kept_codes, kept_scales, kept_lengths = previous.token_vectors(old_rows)  # compaction: live rows move
        codes, scales, lengths = [kept_codes], [kept_scales], list(kept_lengths)
        refs, shards = np.zeros((0, 3), np.int64), []
    for i in order:
        piece_codes, piece_scales = quantize(added.tokens[i])
        codes.append(piece_codes)
        scales.append(piece_scales)
        lengths.append(len(piece_codes))
    if lengths:
        shard = 1 + max([int(p.stem[1:]) for p in tokens.glob("q*.npy")] + [0])
        starts = np.concatenate([[0], np.cumsum(lengths)[:-1]])
        new_refs = np.stack([np.full(len(lengths), shard), starts, np.asarray(lengths)], axis=1)
        refs = np.concatenate([refs, new_refs]).astype(np.int64)
        for target, array in zip(shard_files(tokens, shard), (np.concatenate(codes), np.concatenate(scales))):
            _save(target.with_suffix(".part"), array)
            os.replace(target.with_suffix(".part"), target)
        shards.append(shard)
    _save(tmp / "token_refs.npy", refs.reshape(-1, 3).astype(np.int64))
    return shards


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


def _write_texts(folder: Path, texts: list[str]) -> None:
    encoded = [t.encode("utf-8") for t in texts]
    offsets = np.zeros(len(encoded) + 1, np.int64)
    offsets[1:] = np.cumsum([len(b) for b in encoded])
    (folder / "texts.bin").write_bytes(b"".join(encoded))
    _save(folder / "text_offsets.npy", offsets)


def _save(path: Path, array: np.ndarray) -> None:
    with open(path, "wb") as f:
        np.save(f, array)


def _point_current(partition_dir: Path, name: str) -> None:
    tmp = partition_dir / f".{CURRENT}.tmp"
    with open(tmp, "w") as f:
        f.write(name)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, partition_dir / CURRENT)
    _fsync_dir(partition_dir)


def _fsync_tree(folder: Path) -> None:
    for path in folder.rglob("*"):
        if path.is_file():
            fd = os.open(path, os.O_RDONLY)
            try:
                os.fsync(fd)
            finally:
                os.close(fd)
    for path in [folder, *[p for p in folder.rglob("*") if p.is_dir()]]:
        _fsync_dir(path)


def _fsync_dir(folder: Path) -> None:
    fd = os.open(folder, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
