"""Build the next version of a partition index from the current one plus a delta, and publish it atomically.

A version folder is written completely under a temporary name, fsynced, renamed into place, and only then does
the CURRENT pointer move (temp file + rename). Token shards and codebooks (token_shards.py), shared between
versions, are published the same way (.part, fsync, rename, fsync of tokens/) before the version that uses them.
A crash at any point leaves the previous version current and intact; boot compares it with the store and builds
the missing delta again, and a failed build (a full disk) removes what it wrote.
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

import numpy as np
from usearch.index import Index

from ..config import IndexSettings
from ..paths import fsync_dir
from ..store import Place
from .bm25_terms import TermStats, write_bm25
from .snapshot import CURRENT, FORMAT, PartitionSnapshot, current_version, shard_files
from .token_shards import needs_recoding, write_token_refs
from .tokens import INT8

__all__ = ["NewChunks", "build_version", "collect_garbage", "needs_recoding"]


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
                  params: IndexSettings, tokenize, language: str = "", recode: bool = False) -> PartitionSnapshot:
    """Write a new version = previous - removed + added, make it current, and return it opened. `language` is the
    partition's (what picked `encoder`), recorded with the version. `recode`: also re-code int8 token vectors that
    the settings would store as residuals (a long build on a big partition: only when asked)."""
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
            refs = write_token_refs(tmp, partition_dir, previous, old_rows, [added.tokens[i] for i in order], params,
                                    recode)
            manifest.update(refs.manifest())
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
        stats = _term_stats(previous, old_rows, docs, doc_index, texts, tokenize, params.bm25_incremental)
        write_bm25(tmp / "bm25", stats)  # none when no row has a term ("!!!", stop words): vectors only then
    return int(len(chunk_ids))


def _term_stats(previous, old_rows, docs, doc_index, texts: list[str], tokenize, incremental: bool) -> TermStats:
    """BM25 term statistics of every row (title and text): the previous version's for the kept rows plus the new
    rows' (only they are tokenized), or all rows tokenized (a first build, a version without statistics, a kept
    row whose title changed, or `bm25_incremental` off)."""
    def bm25_texts(rows) -> list[str]:
        return [f"{docs[doc_index[r]]['title']}\n{texts[r]}" for r in rows]

    kept = len(old_rows)
    stats = (TermStats.load(previous.folder / "bm25") if incremental and previous is not None and kept
             else None)
    if stats is not None and stats.rows == previous.size and _titles_kept(previous, old_rows, docs, doc_index):
        return stats.take(old_rows).then(tokenize(bm25_texts(range(kept, len(texts)))))
    return TermStats.from_tokens(tokenize(bm25_texts(range(len(texts)))))


def _titles_kept(previous, old_rows, docs, doc_index) -> bool:
    """Every kept row's document has the title it had (a title is part of its rows' BM25 text)."""
    before = {int(previous.doc_index[r]): i for i, r in enumerate(old_rows)}
    return all(previous.docs[slot]["title"] == docs[doc_index[i]]["title"] for slot, i in before.items())


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
            for path in shard_files(tokens, shard, manifest.get("token_codec", INT8))}
    live |= {tokens / manifest["token_codebook"] for manifest in used if manifest.get("token_codebook")}
    for path in [*tokens.glob("*.npy"), *tokens.glob("codebook-*.npz")]:
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
