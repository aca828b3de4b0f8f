"""The answer path: retrieve -> route -> prompt -> stream tokens, as a sequence of events.

The HTTP layer turns the events into JSON, native SSE or OpenAI chunks; nothing here knows about HTTP. When no
engine can take a request (both down, or queues full) the answer degrades to the retrieved passages, flagged
`degraded`, instead of failing: the caller still gets what the documents say.
"""
from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field

import numpy as np

from .config import GenerateSettings, RouterSettings
from .generate import EngineDown, EnginePool, Passage, Router, build_prompt, normalise_question
from .generate.prompts import PROMPT_VERSION
from .retrieve import Hit, PartitionFilter

MODEL_CHOICES = ("auto", "small", "large")


@dataclass(slots=True)
class AskRequest:
    question: str
    where: PartitionFilter
    model: str = "auto"
    max_tokens: int | None = None
    task: str = "cited"
    request_id: str = field(default_factory=lambda: uuid.uuid4().hex)
    timeout_s: float | None = None  # the answer's deadline from arrival; None: the server's request_timeout_s


@dataclass(slots=True)
class Route:
    engine: str | None  # the engine that answered; None when degraded
    requested: str
    reason: str
    p_large: float | None = None

    def as_dict(self) -> dict:
        return {"engine": self.engine, "requested": self.requested, "reason": self.reason, "p_large": self.p_large}


@dataclass(slots=True)
class Sources:
    sources: list[dict]  # see `source_dicts`; plain data so that a cached answer replays the same way
    partitions: list[str]
    route: Route


@dataclass(slots=True)
class Token:
    text: str


@dataclass(slots=True)
class Done:
    text: str
    route: Route
    degraded: bool
    finish_reason: str
    usage: dict
    timings: dict
    cache: str = "none"  # the layer that answered: exact, semantic or none


@dataclass(slots=True)
class Failed:
    """The engine died mid-answer; the tokens already sent stand, the rest will not come."""
    message: str
    route: Route


Event = Sources | Token | Done | Failed
SearchFn = Callable[[str, PartitionFilter, int], Awaitable]  # -> pipeline.SearchResult
EncodeFn = Callable[[str], Awaitable[np.ndarray]]


class Answerer:
    def __init__(self, pool: EnginePool | None, router: Router | None, generate: GenerateSettings,
                 routing: RouterSettings, search: SearchFn, encode: EncodeFn, deadline_s: float = 3600.0):
        self.pool, self.router, self.generate, self.routing = pool, router, generate, routing
        self._search, self._encode = search, encode
        self.deadline_s = deadline_s  # from the request's arrival to its last token

    async def ask(self, req: AskRequest) -> AsyncIterator[Event]:
        started = time.perf_counter()
        want_route = self.pool is not None and req.model == "auto" and self.router is not None
        if want_route:
            result, embedding = await asyncio.gather(self._search(req.question, req.where, self.generate.passages),
                                                     self._encode(normalise_question(req.question)))
        else:
            result, embedding = await self._search(req.question, req.where, self.generate.passages), None
        timings = dict(result.timings)
        t = time.perf_counter()
        route, engine = self._route(req, embedding, len(result.hits))
        timings["route"] = _ms(t)
        yield Sources(source_dicts(result.hits), result.partitions, route)
        if engine is None:
            timings["total"] = _ms(started)
            yield Done(retrieval_only(result.hits, route.reason), route, True, "degraded", _usage(0, 0, 0), timings)
            return
        async for event in self._generate(req, engine, route, result.hits, timings, started):
            yield event

    def _route(self, req: AskRequest, embedding, n_passages: int):
        if self.pool is None:
            return Route(None, req.model, "generation is turned off (generate.enabled = false)"), None
        if req.model != "auto":
            preferred, reason, p_large = req.model, "requested by the client", None
        elif self.router is None:
            words = len(req.question.split())
            preferred = "small" if words <= self.routing.max_words_small else "large"
            reason, p_large = f"no router model: by length ({words} words)", None
        else:
            decision = self.router.decide(req.question, embedding, self.routing.bias, self.routing.max_words_small,
                                          context_tokens=n_passages * 200)
            preferred, reason, p_large = decision.engine, decision.reason, decision.p_large
        pick = self.pool.pick(preferred, forced=req.model != "auto")
        if pick.engine is None:
            return Route(None, req.model, f"{reason}; degraded to retrieval only: {pick.reason}", p_large), None
        if pick.reason:
            reason = f"{reason}; {pick.reason}"
        return Route(pick.engine.role, req.model, reason, p_large), pick.engine

    async def _generate(self, req: AskRequest, engine, route: Route, hits: list[Hit], timings: dict,
                        started: float) -> AsyncIterator[Event]:
        t = time.perf_counter()
        budget = self.generate.context_tokens // (2 if engine.role == "small" else 1)
        limit = engine.spec.max_tokens
        max_tokens = min(req.max_tokens or self._default_max_tokens(req.task), limit)
        budget = max(0, min(budget, engine.spec.max_model_len - max_tokens - 400))  # room for prefix and question
        prompt = build_prompt(engine.tokenizer, req.task, self.generate.concise,
                              [Passage(h.chunk.title, h.chunk.text) for h in hits], req.question, budget)
        timings["prompt"] = _ms(t)
        t = time.perf_counter()
        parts: list[str] = []
        last, finish = None, None
        deadline = started + min(req.timeout_s or self.deadline_s, self.deadline_s)
        stream = engine.stream(prompt.text, max_tokens, self.generate.temperature, req.request_id)
        try:
            while True:
                try:
                    delta = await asyncio.wait_for(stream.__anext__(), deadline - time.perf_counter())
                except StopAsyncIteration:
                    break
                except asyncio.TimeoutError:  # the engine's stream was cancelled, which aborts the request
                    finish = "deadline"
                    break
                if last is None:
                    timings["ttft"] = _ms(started)
                last = delta
                if delta.text:
                    parts.append(delta.text)
                    yield Token(delta.text)
        except EngineDown as exc:
            self.pool.report_dead(engine)
            if last is not None:
                yield Failed(f"{exc}; the answer is incomplete", route)
                return
            # nothing was sent yet: the request can still be answered by the other engine, or retrieval-only
            pick = self.pool.pick("large" if engine.role == "small" else "small", forced=req.model != "auto")
            route.reason += f"; {exc}"
            if pick.engine is None:
                route.engine = None
                route.reason += "; degraded to retrieval only"
                timings["total"] = _ms(started)
                yield Done(retrieval_only(hits, str(exc)), route, True, "degraded", _usage(0, 0, 0), timings)
                return
            route.engine = pick.engine.role
            async for event in self._generate(req, pick.engine, route, hits, timings, started):
                yield event
            return
        finally:
            await stream.aclose()
        timings["generation"] = _ms(t)
        timings["total"] = _ms(started)
        usage = _usage(last.prompt_tokens, last.completion_tokens, last.cached_tokens) if last else _usage(0, 0, 0)
        usage["passages_in_prompt"] = prompt.passages_used
        finish = finish or (last.finish_reason if last else None) or "stop"
        yield Done("".join(parts), route, False, finish, usage, timings)

    def _default_max_tokens(self, task: str) -> int:
        return self.generate.max_tokens_concise if task == "concise" else self.generate.max_tokens_cited


def source_dicts(hits: list[Hit]) -> list[dict]:
    return [{"n": n, "document_id": h.chunk.doc_key, "chunk_id": h.chunk.chunk_id, "partition": h.partition,
             "title": h.chunk.title, "source": h.chunk.source, "text": h.chunk.text, "score": h.score}
            for n, h in enumerate(hits, 1)]


def retrieval_only(hits: list[Hit], reason: str) -> str:
    lines = [f"No generated answer ({reason}). The most relevant passages:"]
    for n, hit in enumerate(hits, 1):
        snippet = " ".join(hit.chunk.text.split())[:300]
        lines.append(f"[{n}] {hit.chunk.title + ': ' if hit.chunk.title else ''}{snippet}")
    if not hits:
        lines.append("(no passages matched)")
    return "\n".join(lines)


def _usage(prompt: int, completion: int, cached: int) -> dict:
    return {"prompt_tokens": prompt, "completion_tokens": completion, "total_tokens": prompt + completion,
            "cached_prompt_tokens": cached}


def _ms(since: float) -> float:
    return round((time.perf_counter() - since) * 1000, 3)


__all__ = ["AskRequest", "Answerer", "Done", "Event", "Failed", "MODEL_CHOICES", "PROMPT_VERSION", "Route",
           "Sources", "Token", "retrieval_only", "source_dicts"]
