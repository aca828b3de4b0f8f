"""Search-only timing: the query vectors are computed once beforehand, so only the retrieval engines are timed.

End to end, every system spends most of a query in the same MiniLM/USE encoder (7-12 ms here), which hides what
the engines themselves cost. Here the encoder runs once per distinct query before any clock starts; everything
after it stays in the timed part: BM25 tokenisation of the query, both searches, fusion, late interaction, and
turning rows into results (ours and txtai read the chunk texts; faiss+rank_bm25 returns row numbers only).

Throughput runs get about THROUGHPUT_S seconds of (sequential) work each, judged from the latency just measured:
a 1 ms engine needs thousands of requests for a stable figure, and as many would keep a 15 ms one busy for minutes.
"""
from __future__ import annotations

import time
from dataclasses import dataclass

import numpy as np

from appliance.encode import MicroBatcher
from appliance.retrieve import HybridSearcher, Target
from appliance.timings import Timings
from appliance.text import BM25Tokenizer

from .measure import SPEED_K, async_throughput, latency_stats, ms_since, rounds_for, sequential_latency, \
    thread_throughput

THROUGHPUT_S = 10


@dataclass
class QueryVectors:
    """Distinct query texts and their encoder output, row-aligned."""
    texts: list[str]
    dense: np.ndarray  # (n, dim) float32, L2-normalised
    tokens: list[np.ndarray] | None  # per query (tokens, dim) float16; None for encoders without token vectors
    encode_s: float

    def __len__(self) -> int:
        return len(self.texts)

    def head(self, n: int) -> "QueryVectors":
        return QueryVectors(self.texts[:n], self.dense[:n], self.tokens[:n] if self.tokens else None, self.encode_s)


async def encode_queries(batcher: MicroBatcher, texts: list[str]) -> QueryVectors:
    """All queries in one bulk call of the appliance's own encoder (batched by length: the same vectors a single
    query gets, up to float rounding, in a fraction of the time)."""
    started = time.perf_counter()
    encoded = await batcher.encode_many(texts)
    return QueryVectors(list(texts), np.asarray(encoded.dense, np.float32), encoded.tokens,
                        round(time.perf_counter() - started, 1))


class OursSearchOnly:
    """`Appliance.search` minus the encoder call: the appliance's tokenizer, its HybridSearcher and the searcher's
    own thread pool, over fixed targets (picking partitions from metadata costs microseconds and is left out)."""

    def __init__(self, searcher: HybridSearcher, tokenizer: BM25Tokenizer, targets: list[Target],
                 queries: QueryVectors):
        self.searcher, self.tokenizer, self.targets, self.q = searcher, tokenizer, targets, queries

    async def search(self, i: int, late: bool):
        tokens = self.q.tokens[i] if self.q.tokens is not None else None
        return await self.searcher.search(self.targets, self.q.dense[i], tokens, self.tokenizer(self.q.texts[i]),
                                          SPEED_K, Timings(), late=late, mode="hybrid")

    async def measure(self, late: bool, clients: int, max_requests: int, warm_up: int = 5) -> dict:
        """Sequential single queries (latency), then `clients` concurrent asyncio callers (throughput)."""
        rows = list(range(len(self.q)))
        for i in rows[:warm_up]:
            await self.search(i, late)
        samples = []
        for i in rows:
            started = time.perf_counter()
            await self.search(i, late)
            samples.append(ms_since(started))
        latency = latency_stats(samples)
        load = _load(rows, latency["mean_ms"], max_requests)
        return {"latency": latency, "throughput": await async_throughput(lambda i: self.search(i, late), load, clients)}


def measure_peer(peer, queries: QueryVectors, clients: int, max_requests: int, requests: int | None = None) -> dict:
    """A peer's search given the precomputed vector: sequential latency, then `clients` threads (`requests` of them
    when given: rank_bm25 is timed on a fixed few)."""
    def search(i: int):
        return peer.search_vector(queries.texts[i], queries.dense[i:i + 1], SPEED_K)

    rows = list(range(len(queries)))
    before = getattr(peer, "encoder_calls", 0)
    latency = sequential_latency(search, rows)
    load = rounds_for(rows, requests) if requests else _load(rows, latency["mean_ms"], max_requests)
    out = {"latency": latency, "throughput": thread_throughput(search, load, clients)}
    # The peer must not have fallen back to its encoder: that would put encoding back into the timed part.
    assert getattr(peer, "encoder_calls", 0) == before, f"{peer.name} encoded a query during search-only timing"
    return out


def _load(rows: list[int], mean_ms: float, max_requests: int) -> list[int]:
    """Every query at least once; beyond that about THROUGHPUT_S seconds of sequential work, at most max_requests."""
    return rounds_for(rows, min(max_requests, int(THROUGHPUT_S * 1000 / max(mean_ms, 0.01))))
