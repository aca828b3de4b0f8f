"""Our appliance: quality per retrieval mode, single-query latency, and throughput in-process and over HTTP."""
from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

from appliance.evaluate import EVAL_TENANT, BeirData, score_queries
from appliance.retrieve import PartitionFilter

from server_process import free_port, stop, wait_ready

from .data import REPO
from .kit import BenchApp
from .loadclient import Pool
from .measure import QUALITY_K, SPEED_K, async_throughput, latency_stats, ms_since

# (label, mode, late interaction); late interaction needs token vectors (MiniLM only)
CONFIGS = [("bm25", "bm25", False), ("dense", "dense", False), ("hybrid", "hybrid", False),
           ("hybrid+late", "hybrid", True)]


async def quality(app: BenchApp, data: BeirData, has_tokens: bool, log=print) -> dict[str, dict]:
    """The product's own evaluation loop (appliance.evaluate.score_queries) for each configuration."""
    out: dict[str, dict] = {}
    probe = next(iter(data.queries.values()))
    for label, mode, late in CONFIGS:
        if late and not has_tokens:
            out[label] = {"n/a": "encoder has no token vectors"}
            continue
        started = time.perf_counter()
        out[label] = await score_queries(app.services.retriever, data, mode=mode, late_interaction=late)
        # How many chunks a k=150 search really returns: recall@100 means little if it is fewer.
        found = await app.search(probe, PartitionFilter(EVAL_TENANT), QUALITY_K, late_interaction=late, mode=mode)
        out[label]["hits_for_k150"] = len(found.hits)
        log(f"    ours {label:12s} {_brief(out[label])} ({time.perf_counter() - started:.0f} s)")
    return out


async def latency(app: BenchApp, queries: list[str], late: bool = False, warm_up: int = 5) -> dict:
    """Sequential single queries through the retriever's search: query encoding included, HTTP excluded."""
    where = PartitionFilter(EVAL_TENANT)
    for q in queries[:warm_up]:
        await app.search(q, where, SPEED_K, late_interaction=late)
    samples = []
    for q in queries:
        started = time.perf_counter()
        await app.search(q, where, SPEED_K, late_interaction=late)
        samples.append(ms_since(started))
    return latency_stats(samples)


async def inprocess_throughput(app: BenchApp, queries: list[str], clients: int, late: bool) -> dict:
    """`clients` concurrent asyncio callers of the retriever's search: the like-for-like figure against in-process
    peers."""
    where = PartitionFilter(EVAL_TENANT)
    await app.search(queries[0], where, SPEED_K, late_interaction=late)
    stats = app.services.retriever.encoder_stats()
    batches_before, items_before = stats.batches, stats.items
    result = await async_throughput(lambda q: app.search(q, where, SPEED_K, late_interaction=late), queries, clients)
    batches = stats.batches - batches_before  # how well the micro-batcher coalesced the concurrent encodings
    result["mean_encode_batch"] = round((stats.items - items_before) / max(batches, 1), 1)
    return result


class Server:
    """The real server (`python -m appliance serve`) in a child process on a free loopback port."""

    def __init__(self, data_dir: Path, encoder: str):
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.env = {**os.environ, "APPLIANCE_DATA_DIR": str(data_dir), "APPLIANCE_MODELS_DIR": str(REPO / "models"),
                    "APPLIANCE_DEMO_CORPUS": "false", "APPLIANCE_ENCODER_MODEL": encoder,
                    "APPLIANCE_LOG_LEVEL": "warning"}
        self.log_path = data_dir.parent / f"server-{data_dir.name}.log"  # a pipe could fill and stall the server
        self.proc: subprocess.Popen | None = None
        self.boot_s: float | None = None

    async def __aenter__(self) -> "Server":
        with self.log_path.open("wb") as log:  # the child keeps its own handle
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "appliance", "serve", "--host", "127.0.0.1", "--port", str(self.port)],
                cwd=REPO, env=self.env, stdout=subprocess.DEVNULL, stderr=log)
        self.boot_s = await wait_ready(self.proc, self.url, self.log_path, 300)
        return self

    async def __aexit__(self, *exc) -> None:
        await stop(self.proc)


async def http_throughput(data_dir: Path, encoder: str, queries: list[str], clients: int) -> dict:
    """`clients` concurrent HTTP clients (kept-alive connections) against the real server on loopback. They run in
    this process and share the machine's cores with the server, as any load test on one box does."""
    async with Server(data_dir, encoder) as server, Pool("127.0.0.1", server.port, clients) as pool:
        async def search(q: str) -> None:
            await pool.request("POST", "/v1/search", {"tenant": EVAL_TENANT, "query": q, "k": SPEED_K})

        async def health(_: str) -> None:
            await pool.request("GET", "/healthz")

        first = json.loads(await pool.request("POST", "/v1/search", {"tenant": EVAL_TENANT, "query": queries[0],
                                                                     "k": SPEED_K}))
        if len(first["results"]) != SPEED_K:
            raise RuntimeError(f"the server returned {len(first['results'])} results, not {SPEED_K}")
        result = await async_throughput(search, queries, clients)
        # The same clients against a route that does no work: the ceiling of HTTP on this box (client included).
        result["healthz_qps"] = (await async_throughput(health, queries, clients))["qps"]
    result["server_boot_s"] = server.boot_s
    return result


def _brief(m: dict) -> str:
    return f"nDCG@10 {m['ndcg@10']:.4f}  R@100 {m['recall@100']:.4f}  p50 {m['p50_ms']} ms  p99 {m['p99_ms']} ms"
