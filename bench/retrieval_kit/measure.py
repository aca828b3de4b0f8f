"""Timing and scoring helpers shared by every system under test, so all of them are measured the same way."""
from __future__ import annotations

import asyncio
import itertools
import os
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any, Awaitable, Callable, Iterable

import numpy as np

from appliance.evaluate import RECALL_CHUNKS, BeirData, mrr_at, ndcg_at, recall_at

# As appliance.evaluate.score_queries does: nDCG@10 and MRR@10 from the k=10 page a client asks for (each list
# over-fetches 10 x k, so k changes the fusion), recall@100 from a second, deeper search.
PAGE_K = 10
QUALITY_K = RECALL_CHUNKS  # chunks fetched for recall@100 (documents have ~1.6 chunks each)
SPEED_K = 10  # results per request when timing: what an app asks for


def ms_since(started: float) -> float:
    return (time.perf_counter() - started) * 1000


def latency_stats(samples_ms: list[float]) -> dict:
    a = np.asarray(samples_ms, dtype=np.float64)
    return {"p50_ms": round(float(np.percentile(a, 50)), 2), "p99_ms": round(float(np.percentile(a, 99)), 2),
            "mean_ms": round(float(a.mean()), 2), "n": int(len(a))}


def doc_ranking(doc_keys: Iterable[str]) -> list[str]:
    """Chunks -> documents: a document ranks where its best chunk does (as in appliance.evaluate)."""
    return list(dict.fromkeys(doc_keys))


def score_rankings(data: BeirData, page: dict[str, list[str]], deep: dict[str, list[str]]) -> dict:
    """Average nDCG@10 and MRR@10 of the k=10 pages and recall@100 of the deep rankings, with the product's own
    metric functions."""
    ndcg, recall, mrr = [], [], []
    for qid, docs in page.items():
        relevant = data.qrels[qid]
        ndcg.append(ndcg_at(docs, relevant))
        mrr.append(mrr_at(docs, relevant))
        recall.append(recall_at(deep[qid], relevant))
    return {"ndcg@10": round(float(np.mean(ndcg)), 4), "recall@100": round(float(np.mean(recall)), 4),
            "mrr@10": round(float(np.mean(mrr)), 4), "queries": len(page)}


def sequential_latency(search: Callable[[Any], object], queries: list, warm_up: int = 5) -> dict:
    for q in queries[:warm_up]:
        search(q)
    samples = []
    for q in queries:
        started = time.perf_counter()
        search(q)
        samples.append(ms_since(started))
    return latency_stats(samples)


def thread_throughput(search: Callable[[Any], object], queries: list, clients: int) -> dict:
    """`clients` threads share one queue of requests; queries/s = requests / wall time of the whole batch."""
    pending = iter(queries)

    def worker() -> list[float]:
        samples = []
        for q in pending:  # one shared list iterator: each request goes to exactly one thread (atomic under the GIL)
            started = time.perf_counter()
            search(q)
            samples.append(ms_since(started))
        return samples

    started = time.perf_counter()
    with ThreadPoolExecutor(clients) as pool:
        results = list(pool.map(lambda _: worker(), range(clients)))
    return _throughput(started, list(itertools.chain(*results)), clients)


async def async_throughput(search: Callable[[Any], Awaitable[object]], queries: list, clients: int) -> dict:
    """`clients` asyncio tasks share one queue of requests (in-process or HTTP: the caller's `search` decides)."""
    pending = iter(queries)
    errors = 0

    async def worker() -> list[float]:
        nonlocal errors
        samples = []
        for q in pending:
            started = time.perf_counter()
            try:
                await search(q)
            except Exception:  # counted, not fatal: a failed request must show in the report, not hide the rest
                errors += 1
                continue
            samples.append(ms_since(started))
        return samples

    started = time.perf_counter()
    results = await asyncio.gather(*(worker() for _ in range(clients)))
    out = _throughput(started, list(itertools.chain(*results)), clients)
    out["errors"] = errors
    return out


def _throughput(started: float, samples: list[float], clients: int) -> dict:
    wall = time.perf_counter() - started
    return {"qps": round(len(samples) / wall, 1), "requests": len(samples), "clients": clients,
            "wall_s": round(wall, 2), **{f"client_{k}": v for k, v in latency_stats(samples).items() if k != "n"}}


def rounds_for(queries: list, minimum: int) -> list:
    """The distinct queries repeated until at least `minimum` requests (the search path has no result cache)."""
    if not queries:
        return []
    repeat = max(1, -(-minimum // len(queries)))
    return queries * repeat


def rss_bytes() -> dict[str, int]:
    """Resident memory split as the kernel reports it: anonymous (heap) and file-backed (mapped files, i.e. page
    cache the kernel can drop and re-read), in bytes."""
    out = {}
    with open("/proc/self/status") as f:
        for line in f:
            key, _, value = line.partition(":")
            if key in ("RssAnon", "RssFile"):
                out[key[3:].lower()] = int(value.split()[0]) * 1024
    return out


def folder_bytes(path: os.PathLike) -> int:
    total = 0
    for root, _, files in os.walk(path):
        for name in files:
            total += os.path.getsize(os.path.join(root, name))
    return total


def evict(folder: Path) -> None:
    """Drop the files' pages from the page cache (as after a reboot), where nothing maps them."""
    for path in folder.rglob("*"):
        if path.is_file():
            fd = os.open(path, os.O_RDONLY)
            try:
                os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
            finally:
                os.close(fd)
