"""Scale: one partition of ~100k chunks, search latency with query encoding (HTTP excluded) and its memory.

The chunks are SciFact's own, repeated with small perturbations, because encoding 100k texts would take hours on
2 cores: each copy's vector gets gaussian noise (then re-normalised) and its text loses one word and has two
neighbouring words swapped, so neither the HNSW graph nor the BM25 index sees exact duplicates. The partition is
written with the product's own `build_version`, and searched through the same path as `the retriever's search`:
the micro-batched encoder, the BM25 tokenizer and `HybridSearcher` with the default settings. Then, search-only
(query vectors computed beforehand), the same searcher alone and the peers over the same chunks (scalepeers.py).
"""
from __future__ import annotations

import asyncio
import gc
import json
import random
import shutil
import time
from pathlib import Path

import numpy as np

from appliance.config import IndexSettings
from appliance.index import NewChunks, PartitionSnapshot, build_version, current_version
from appliance.retrieve import Target
from appliance.text import BM25Tokenizer

from .cold import cold_and_warm, timed_search
from .data import CACHE, code_hash, make_settings
from .kit import StageKit
from .measure import folder_bytes, latency_stats, rss_bytes
from .searchonly import OursSearchOnly, QueryVectors, encode_queries

NOISE = 0.01  # per dimension; a copy keeps cosine ~0.98 with its original chunk
WARM_UP = 5  # untimed queries before each timed pass
# Chunks per build when token vectors are written. Each build copies the rows so far into its version, so a bigger
# partition takes bigger steps: 10 builds of 100k at 1M rather than 100 of 10k. (The copies' token vectors are the
# source's own arrays, decoded once, so a step's input does not grow with it.)
TOKEN_STEP = 10_000
TOKEN_STEPS_MAX = 10


def build(source: PartitionSnapshot, n_chunks: int, with_tokens: bool, index_settings, log=print) -> tuple[Path, dict]:
    """Write (or reuse) the synthetic partition; returns its partition folder and build facts."""
    tag = f"scale-{n_chunks}-{'tokens' if with_tokens else 'dense'}"
    partition_dir = CACHE / tag / "p000001"
    meta_path = partition_dir.parent / "bench-meta.json"
    wanted = {"chunks": n_chunks, "source": source.folder.name, "code": code_hash()}  # source: its version folder
    if meta_path.exists() and current_version(partition_dir) is not None:
        meta = json.loads(meta_path.read_text())
        if {k: meta.get(k) for k in wanted} == wanted:
            log(f"  {tag}: reusing cached partition (built in {meta['build_s']} s)")
            return partition_dir, meta
    shutil.rmtree(partition_dir.parent, ignore_errors=True)
    partition_dir.mkdir(parents=True)
    log(f"  building {n_chunks} chunks from {source.size} SciFact chunks"
        f"{' with token vectors' if with_tokens else ''}")
    source_tokens = _decoded_tokens(source, log) if with_tokens else None  # the input, made before the clock starts
    started = time.perf_counter()
    rng = np.random.default_rng(0)
    words = random.Random(0)
    tokenizer = BM25Tokenizer()
    # a build holds its new shard's codes in memory (~9 GB for 1M chunks in one build)
    step = max(TOKEN_STEP, -(-n_chunks // TOKEN_STEPS_MAX)) if with_tokens else n_chunks
    snapshot = None
    for version, start in enumerate(range(0, n_chunks, step), start=1):
        ids = np.arange(start, min(start + step, n_chunks), dtype=np.int64)
        src = ids % source.size
        dense = np.asarray(source.dense, dtype=np.float32)[src] + rng.normal(0, NOISE, (len(ids), source.dim))
        dense /= np.linalg.norm(dense, axis=1, keepdims=True)
        docs = []
        for i, row in zip(ids, src):
            info = source.docs[int(source.doc_index[row])]
            docs.append({**info, "key": f"{info['key']}~{i // source.size}"})
        added = NewChunks(
            chunk_ids=ids + 1, ordinals=np.asarray(source.ordinals, np.int32)[src],
            texts=[_perturb(source.text(int(r)), words) for r in src], docs=docs, dense=dense.astype(np.float32),
            tokens=[source_tokens[int(r)] for r in src] if source_tokens is not None else None,
        )
        snapshot = build_version(partition_dir, 1, version, source.encoder, source.dim, snapshot,
                                 np.zeros(0, np.int64), added, index_settings, tokenizer.many)
        log(f"    {snapshot.size} chunks written ({time.perf_counter() - started:.0f} s)")
    meta = {**wanted, "build_s": round(time.perf_counter() - started, 1), "token_vectors": with_tokens}
    meta_path.write_text(json.dumps(meta))
    return partition_dir, meta


def _decoded_tokens(source: PartitionSnapshot, log) -> list[np.ndarray]:
    """Every source row's token vectors as f16, the form NewChunks takes (the index stores them coded): ~1.2 GB for
    SciFact, shared by all the copies of a row."""
    started = time.perf_counter()
    out = [source.token_vectors([row]).vectors.astype(np.float16) for row in range(source.size)]
    log(f"    {source.size} source rows' token vectors decoded in {time.perf_counter() - started:.1f} s (not timed)")
    return out


def _perturb(text: str, rng: random.Random) -> str:
    words = text.split()
    if len(words) > 3:
        del words[rng.randrange(len(words))]
        i = rng.randrange(len(words) - 1)
        words[i], words[i + 1] = words[i + 1], words[i]
    return " ".join(words)


async def measure(partition_dir: Path, source: PartitionSnapshot, queries: list[str], late: bool,
                  search_only: dict | None) -> tuple[dict, QueryVectors | None]:
    """Open the partition fresh, then time sequential searches; memory = files on disk and RSS growth.
    The encoder, tokenizer and searcher are the product's own stage classes built from its settings.
    `search_only` ({"clients", "max_requests"}): also time the searcher alone; the query vectors are returned."""
    app = await StageKit.open(make_settings(partition_dir.parent / "app", "minilm"))
    try:
        version = current_version(partition_dir)
        gc.collect()
        rss_before = rss_bytes()
        snapshot = PartitionSnapshot(version, IndexSettings().expansion_search)
        rss_open = rss_bytes()
        targets = [Target("scale", snapshot)]
        out: dict = {"chunks": snapshot.size}
        configs = [("hybrid", False)] + ([("hybrid+late", True)] if late else [])
        for label, with_late in configs:
            for q in queries[:WARM_UP]:
                await timed_search(app, targets, q, with_late)
            runs = [await timed_search(app, targets, q, with_late) for q in queries]
            out[label] = latency_stats([t["total"] for t in runs])
            out[label]["stages_p99_ms"] = {s: round(float(np.percentile([t.get(s, 0.0) for t in runs], 99)), 2)
                                           for s in runs[0] if s != "total"}
        rss_after = rss_bytes()
        vectors = None
        if search_only is not None:
            vectors = await encode_queries(app.batcher, queries)
            engine = OursSearchOnly(app.searcher, app.tokenizer, targets, vectors)
            out["search_only"] = {label: await engine.measure(with_late, **search_only) for label, with_late in configs}
            rss_loaded = rss_bytes()
        token_bytes = folder_bytes(partition_dir / "tokens") if snapshot.has_token_vectors else 0
        out["memory"] = {
            "version_folder_bytes": folder_bytes(version),
            "token_shard_bytes": token_bytes,
            "token_shard_bytes_estimated": None if token_bytes else _estimate_tokens(source, snapshot.size),
            "rss_growth_open": {k: rss_open[k] - rss_before[k] for k in rss_before},
            "rss_growth_after_queries": {k: rss_after[k] - rss_before[k] for k in rss_before},
            "queries_before_rss": (min(WARM_UP, len(queries)) + len(queries)) * len(configs),
        }
        if search_only is not None:  # after thousands of requests from 32 clients as well
            out["memory"]["rss_growth_after_search_only"] = {k: rss_loaded[k] - rss_before[k] for k in rss_before}
            out["memory"]["requests_before_rss_search_only"] = sum(
                r["throughput"]["requests"] for r in out["search_only"].values())
        out["version_folder"] = str(version)
        return out, vectors
    finally:
        await app.stop()


def _estimate_tokens(source: PartitionSnapshot, chunks: int) -> int | None:
    """Token shards of `chunks` chunks at the source partition's measured bytes per chunk (not written here)."""
    if not source.has_token_vectors or not source.size:
        return None
    arrays = [a for shard in source.token_shards.values() for a in (shard if isinstance(shard, tuple) else (shard,))]
    shard_rows = sum(len(shard[0] if isinstance(shard, tuple) else shard) for shard in source.token_shards.values())
    live_rows = int(np.asarray(source.token_refs)[:, 2].sum())  # token rows this version uses
    per_row = sum(a.nbytes for a in arrays) / max(shard_rows, 1)
    return int(per_row * live_rows / source.size * chunks)


async def run(source_version: Path, n_chunks: int, queries: list[str], with_tokens: bool, log=print,
              search_only: dict | None = None) -> tuple[dict, QueryVectors | None]:
    """Build (or reuse) the partition and time it; returns the figures and, with `search_only`, the query vectors
    (for the peers, which are built over the same partition: the result's "version_folder")."""
    source = PartitionSnapshot(source_version)
    index_settings = make_settings(CACHE / "unused", "minilm").index
    partition_dir, meta = await asyncio.to_thread(build, source, n_chunks, with_tokens, index_settings, log)
    cold = await asyncio.to_thread(cold_and_warm, partition_dir, queries, with_tokens)
    log(f"    after a boot: {cold}")
    out, vectors = await measure(partition_dir, source, queries, with_tokens, search_only)
    return {"build": meta, **out, "cold": cold}, vectors
