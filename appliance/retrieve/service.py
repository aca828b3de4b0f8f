"""The retriever: a query's vectors (embedding cache, else the micro-batched encoder of each encoder its
partitions were built by), the partitions it may search, then the hybrid search; one `SearchResult` with
per-stage timings."""
from __future__ import annotations

import asyncio
import time
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Protocol

from ..cache import EmbeddingCache
from ..encode import BatchStats, CharVectors, EncoderSet, Query
from ..text import BM25Tokenizer, question_language
from ..timings import Stage, Timings
from .hybrid import CharLate, Hit, HybridSearcher, Target
from .languages import TargetGroup, fuse_groups, group_targets, language_weight
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
    encoders: tuple[str, ...] = ()  # the encoders the query was encoded by (one per encoder of those partitions)


class Retriever:
    def __init__(self, source: PartitionSource, encoders: EncoderSet, tokenizer: BM25Tokenizer,
                 searcher: HybridSearcher, embeddings: EmbeddingCache | None, default_k: int,
                 chars: Mapping[str, CharVectors] | None = None):
        """`chars`: by encoder, the character vectors of encoders without token vectors (Chinese late
        interaction)."""
        self._source, self._encoders, self._tokenizer, self._searcher = source, encoders, tokenizer, searcher
        self._embeddings, self._default_k = embeddings, default_k
        self._chars = dict(chars or {})

    async def search(self, query: str, where: PartitionFilter, k: int | None = None,
                     late_interaction: bool | None = None, mode: str = "hybrid") -> SearchResult:
        timings = Timings()
        started = time.perf_counter()
        targets = [t for t in self._source.targets(where) if self._encoders.get(t.snapshot.encoder) is not None]
        timings.since(Stage.PARTITIONS, started)
        if not targets:
            timings.since(Stage.TOTAL, started)
            return SearchResult([], [], timings)
        k = k or self._default_k
        params = self._searcher.params
        groups = group_targets(targets)
        asked_in = question_language(query)
        weights = [language_weight(g.language, asked_in, params.other_language_weight) for g in groups]
        # The other language's lists can only follow the question's own when its weight keeps their best rank
        # below the own lists' k-th: then they are searched (and their encoder run) only if those fall short of k.
        own = [i for i, w in enumerate(weights) if w >= 1.0]
        deferred = [i for i, w in enumerate(weights) if w < 1.0]
        if own and deferred and max(weights[i] for i in deferred) / (params.rrf_k + 1) < 1 / (params.rrf_k + k):
            first = own
        else:
            first, deferred = own + deferred, []
        search = _GroupSearch(self._searcher, self._tokenizer, self.encode, self._chars, query, where.tenant, k,
                              late_interaction, mode, timings)
        lists = dict(zip(first, await search.run([groups[i] for i in first])))
        if deferred and sum(len(hits) for hits in lists.values()) < k:
            lists.update(zip(deferred, await search.run([groups[i] for i in deferred])))
        order = sorted(lists)
        hits = lists[order[0]] if len(order) == 1 else fuse_groups([lists[i] for i in order],
                                                                   [weights[i] for i in order], k, params.rrf_k)
        timings.since(Stage.TOTAL, started)
        return SearchResult(hits, [t.name for i in order for t in groups[i].targets], timings,
                            tuple(search.vectors))

    def encoder_stats(self, encoder: str | None = None) -> BatchStats:
        """How well an encoder's micro-batcher coalesces concurrent encodings (benchmarks report it); English's
        encoder by default."""
        batcher = self._encoders.get(encoder) if encoder else self._encoders.for_language("en")
        if batcher is None:
            raise KeyError(f"no encoder {encoder!r} on this box")
        return batcher.stats

    def encoder_for(self, text: str) -> str:
        """The encoder a question in this text's language is encoded by (its semantic-cache space, its router)."""
        return self._encoders.name_for(question_language(text))

    async def encode(self, text: str, tenant: str | None = None, *, encoder: str | None = None) -> Query:
        """The text's vectors from `encoder` (default: the one for its language): from the tenant's embedding
        cache, else from that encoder's micro-batcher. Without a tenant (warm-up) the cache is neither read nor
        filled: its entries belong to one tenant each."""
        name = encoder or self.encoder_for(text)
        batcher = self._encoders.get(name)
        if batcher is None:
            raise KeyError(f"no encoder {name!r} on this box")
        if tenant is None or self._embeddings is None:
            return await batcher.encode(text)
        found = self._embeddings.get(tenant, text, name)
        if found is None:
            found = await batcher.encode(text)
            self._embeddings.put(tenant, text, found, name)
        return found


class _GroupSearch:
    """One search's groups of partitions: the query encoded once per encoder (all of a stage's encoders at once,
    with the BM25 terms), then each group searched with its language's dense weight (a partition's own wins)."""

    def __init__(self, searcher: HybridSearcher, tokenizer: BM25Tokenizer, encode, chars: dict[str, CharVectors],
                 query: str, tenant: str, k: int, late: bool | None, mode: str, timings: Timings):
        self.searcher, self.tokenizer, self.encode = searcher, tokenizer, encode  # encode: Retriever.encode
        self.chars = chars
        self.query, self.tenant, self.k = query, tenant, k
        self.late, self.mode, self.timings = late, mode, timings
        self.vectors: dict[str, Query] = {}
        self.terms: list[str] | None = None

    async def run(self, groups: list[TargetGroup]) -> list[list[Hit]]:
        await self._encode([g.encoder for g in groups])
        params = self.searcher.params
        searches = []
        for group in groups:
            encoded = self.vectors[group.encoder]
            chinese = group.language == "zh"
            weight = params.dense_weight_zh if chinese else params.dense_weight
            chars = self.chars.get(group.encoder) if chinese else None
            searches.append(self.searcher.search(
                group.targets, encoded.dense, encoded.tokens, self.terms or [], self.k, self.timings,
                late=self.late, mode=self.mode, dense_weight=weight,
                chars=CharLate(chars, self.query, params.late_weight_zh) if chars is not None else None))
        return list(await asyncio.gather(*searches))  # several groups: their stage times add up

    async def _encode(self, encoders: list[str]) -> None:
        names = [name for name in dict.fromkeys(encoders) if name not in self.vectors]
        t = time.perf_counter()
        jobs = [self.encode(self.query, self.tenant, encoder=name) for name in names]
        if self.terms is None:
            if len(self.query) <= INLINE_TERMS_CHARS:  # microseconds: a thread hand-off would cost more
                self.terms = self.tokenizer(self.query)
            else:  # on a worker thread while it encodes (jieba takes ~10 ms for a 4,000-character Chinese query)
                jobs.append(asyncio.to_thread(self.tokenizer, self.query))
        results = await asyncio.gather(*jobs)
        if len(results) > len(names):
            self.terms = results.pop()
        self.vectors.update(zip(names, results))
        if names or len(results):
            self.timings.since(Stage.ENCODE, t)  # encoders of one stage run at once: the slower one's time
