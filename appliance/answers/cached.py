"""The cache layers around the answer path: exact -> (encode) -> semantic -> compute, then fill.

A repeat of a question (same tenant, partitions, index versions, prompt version and request shape) is answered
from the exact cache; a paraphrase from the semantic cache once it passes the second check; concurrent identical
misses compute once (single flight). Only deterministic, complete, non-degraded answers are stored, so a cache
never replays an answer that a retry could have done better.
"""
from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Callable
from dataclasses import asdict

from ..cache import ExactCache, SemanticCache, SingleFlight, answer_key
from ..retrieve import PartitionFilter, Retriever
from ..timings import Stage, Timings, ms_since
from .checks import grounding_from_json, grounding_json
from .answer import Answerer, AskRequest, Done, Event, Route, Source, Sources, Token, Usage

# "deadline" answers are cut short by load, not by the question; extractive ones are the passages' own sentences,
# the same for the same index versions whatever the sampling temperature
CACHEABLE_FINISH = ("stop", "length", "extractive")


class CachedAnswerer:
    def __init__(self, answerer: Answerer, retriever: Retriever, exact: ExactCache, semantic: SemanticCache | None,
                 flight: SingleFlight, versions: Callable[[PartitionFilter], dict[str, int]], deterministic: bool):
        self.answerer, self.retriever, self.flight = answerer, retriever, flight
        self.exact, self.semantic = exact, semantic
        self._versions = versions
        self.deterministic = deterministic  # temperature 0: the same prompt gives the same answer

    async def ask(self, req: AskRequest) -> AsyncIterator[Event]:
        started = time.perf_counter()
        timings = Timings()
        versions = self._versions(req.where)
        context = req.context_key()  # a follow-up's answer depends on its conversation: cached under it
        scope = f"{self.answerer.cache_scope()}|{req.model}|{req.task}|{req.max_tokens}|{context}"
        key = answer_key(req.question, req.where.tenant, versions, scope)
        t = time.perf_counter()
        cached = await asyncio.to_thread(self._exact_get, key, req.where.tenant)
        timings.since(Stage.EXACT_CACHE, t)
        if cached is None and not self.flight.lead(key):
            cached = await self.flight.wait(key)  # an identical request is computing it: share its answer
            leader = False
        else:
            leader = cached is None
        if cached is not None:
            for event in _replay(cached, "exact", req, timings, started):
                yield event
            return
        payload = None
        try:
            t = time.perf_counter()
            encoder = self.retriever.encoder_for(req.question)  # English by MiniLM, Chinese by USE: each its space
            query = await self.retriever.encode(req.question, req.where.tenant, encoder=encoder)
            timings.since(Stage.ENCODE, t)
            # a paraphrase match ignores the conversation; and an encoder without a space here has no entries
            semantic = self.semantic if not context and self.semantic and self.semantic.serves(encoder) else None
            if semantic is not None:
                t = time.perf_counter()
                found = await asyncio.to_thread(semantic.lookup, req.where.tenant, scope, req.question,
                                                query.dense, versions, query.tokens, query.unknown, encoder)
                timings.since(Stage.SEMANTIC_CACHE, t)
                if found.hit is not None:
                    payload = {**found.hit.payload, "entry_id": found.hit.entry_id}
                    await asyncio.to_thread(self.exact.put, key, payload)
                    for event in _replay(payload, "semantic", req, timings, started):
                        yield event
                    return
            sources = None
            parts = []
            async for event in self.answerer.ask(req):
                if isinstance(event, Sources):
                    sources = event
                elif isinstance(event, Token):
                    parts.append(event.text)
                elif isinstance(event, Done):
                    event.timings.merge(timings)
                    event.timings.set(Stage.TOTAL, ms_since(started))
                    if self._cacheable(event) and sources is not None:
                        payload = _payload(event, sources)
                        await asyncio.to_thread(self._fill, key, req, scope, query, encoder, versions, payload)
                yield event
        finally:
            if leader:
                self.flight.finish(key, payload)

    def _cacheable(self, done: Done) -> bool:
        deterministic = self.deterministic or done.finish_reason == "extractive"
        return (deterministic and not done.degraded and done.finish_reason in CACHEABLE_FINISH
                and bool(done.text.strip()))

    def _fill(self, key: str, req: AskRequest, scope: str, query, encoder: str, versions: dict[str, int],
              payload: dict) -> None:
        if self.semantic is not None and not req.context_key() and self.semantic.serves(encoder):
            entry_id = self.semantic.store(req.where.tenant, scope, req.question, query.dense, versions, payload,
                                           query.tokens, query.unknown, encoder)
            if entry_id is not None:  # None: a question its encoder cannot represent has no semantic entry
                payload["entry_id"] = entry_id
        self.exact.put(key, payload)

    def _exact_get(self, key: str, tenant: str) -> dict | None:
        """An exact entry stands only while the semantic entry it came from does: an operator who deletes a
        wrong answer (by its semantic entry) removes every exact copy of it too."""
        payload = self.exact.get(key)
        entry_id = payload.get("entry_id") if payload else None
        if entry_id is not None and self.semantic is not None and not self.semantic.holds(tenant, entry_id):
            self.exact.delete(key)
            return None
        return payload


def _payload(done: Done, sources: Sources) -> dict:
    """What is stored: plain data (diskcache pickles it; a restart must read it back whatever the classes became)."""
    return {"answer": done.text, "finish_reason": done.finish_reason, "route": asdict(done.route),
            "sources": [asdict(s) for s in sources.sources], "partitions": sources.partitions,
            "usage": asdict(done.usage), "grounding": grounding_json(done.grounding) if done.grounding else None,
            "cached_at": time.time()}


def _replay(payload: dict, layer: str, req: AskRequest, timings: Timings, started: float):
    """A cached answer as the same events a fresh one gives: sources, the text as one token, done."""
    first = payload["route"]
    route = Route(first.get("engine"), req.model, f"cached answer ({layer}); first answered by "
                  f"{first.get('engine')}", first.get("p_large"))
    yield Sources([Source(**s) for s in payload["sources"]], payload["partitions"], route)
    yield Token(payload["answer"])
    timings.set(Stage.TOTAL, ms_since(started))
    yield Done(payload["answer"], route, False, payload["finish_reason"], Usage(), timings.copy(), cache=layer,
               grounding=grounding_from_json(payload.get("grounding")))
