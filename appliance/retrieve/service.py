"""The retriever: a query's vectors (embedding cache, else the micro-batched encoder), the partitions it may
search, then the hybrid search; one `SearchResult` with per-stage timings."""
from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass
from typing import Protocol

from ..cache import EmbeddingCache
from ..encode import BatchStats, MicroBatcher, Query
from ..text import BM25Tokenizer
from ..timings import Stage, Timings
from .hybrid import Hit, HybridSearcher, Target
from .partitions import PartitionFilter


INLINE_TERMS_CHARS = 256  # queries up to this long get their BM25 terms on the event loop (< 1 ms even for jieba)


class PartitionSource(Protocol):
    def targets(self, where: PartitionFilter) -> list[Target]:
        """The current snapshots of the partitions `where` selects."""
        ...


@dataclass(slots=True)
class SearchResult:
    hits: list[Hit]
    partitions: list[str]  # the partitions searched
    timings: Timings


class Retriever:
    def __init__(self, source: PartitionSource, batcher: MicroBatcher, tokenizer: BM25Tokenizer,
                 searcher: HybridSearcher, embeddings: EmbeddingCache | None, default_k: int):
        self._source, self._batcher, self._tokenizer, self._searcher = source, batcher, tokenizer, searcher
        self._embeddings, self._default_k = embeddings, default_k

    async def search(self, query: str, where: PartitionFilter, k: int | None = None,
                     late_interaction: bool | None = None, mode: str = "hybrid") -> SearchResult:
        timings = Timings()
        started = time.perf_counter()
        targets = self._source.targets(where)
        timings.since(Stage.PARTITIONS, started)
        if not targets:
            timings.since(Stage.TOTAL, started)
            return SearchResult([], [], timings)
        t = time.perf_counter()
        if len(query) <= INLINE_TERMS_CHARS:  # microseconds: a thread hand-off would cost more than it saves
            encoded, terms = await self.encode(query, where.tenant), self._tokenizer(query)
        else:  # on a worker thread while it encodes (jieba takes ~10 ms for a 4,000-character Chinese query)
            encoded, terms = await asyncio.gather(self.encode(query, where.tenant),
                                                  asyncio.to_thread(self._tokenizer, query))
        timings.since(Stage.ENCODE, t)
        hits = await self._searcher.search(targets, encoded.dense, encoded.tokens, terms, k or self._default_k,
                                           timings, late=late_interaction, mode=mode)
        timings.since(Stage.TOTAL, started)
        return SearchResult(hits, [t.name for t in targets], timings)

    @property
    def encoder_stats(self) -> BatchStats:
        """How well the micro-batcher coalesces concurrent encodings (benchmarks report it)."""
        return self._batcher.stats

    async def encode(self, text: str, tenant: str | None = None) -> Query:
        """The query's vectors: from the tenant's embedding cache, else from the micro-batched encoder. Without a
        tenant (warm-up) the cache is neither read nor filled: its entries belong to one tenant each."""
        if tenant is None or self._embeddings is None:
            return await self._batcher.encode(text)
        found = self._embeddings.get(tenant, text)
        if found is None:
            found = await self._batcher.encode(text)
            self._embeddings.put(tenant, text, found)
        return found
