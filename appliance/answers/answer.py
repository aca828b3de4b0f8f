"""The answer path: retrieve -> route -> prompt -> stream tokens, as a sequence of events.

The HTTP layer turns the events into JSON, native SSE or OpenAI chunks; nothing here knows about HTTP, vLLM or
which roles exist: engines come from an `EngineSet`. When no engine can take a request (all down, or queues
full) the answer degrades to the retrieved passages, flagged `degraded`, instead of failing: the caller still
gets what the documents say.
"""
from __future__ import annotations

import asyncio
import hashlib
import time
import uuid
from collections.abc import AsyncIterator, Mapping
from dataclasses import dataclass, field

from ..config import ConversationSettings, GenerateSettings, RouterSettings
from ..generate import (PROMPT_VERSION, EngineDown, EngineSet, Passage, TextEngine, build_prompt, fit_tokens,
                        recent_history)
from ..generate.repetition import repeated_tail
from ..grounding import SUPPORTED, Grounding, cited_numbers
from ..retrieve import Hit, PartitionFilter, Retriever, SearchResult
from ..router import Router
from ..text import Turn, normalise_question
from ..timings import Stage, Timings, ms_since
from .checks import (NOT_COVERED, check_generated, declining_odds, extractive, not_checked, passage_texts,
                     retrieval_only, uncovered_reason)

AUTO = "auto"
PROMPT_RESERVE = 400  # tokens of the context kept beside the budgeted parts: our system prefix and the question
QUESTION_RESERVE_TOKENS = 200  # of that reserve, the question's; a longer one takes room from the passages
LOOP_CHECK_EVERY = 4  # stream deltas between two looks for a repeated tail


@dataclass(slots=True)
class AskRequest:
    question: str  # what is searched, routed and cached by: the standalone question once the stage has run
    where: PartitionFilter
    model: str = AUTO  # "auto" (the router picks) or an engine role
    max_tokens: int | None = None
    task: str = "cited"
    request_id: str = field(default_factory=lambda: uuid.uuid4().hex)
    timeout_s: float | None = None  # the answer's deadline from arrival; None: the server's request_timeout_s
    history: tuple[Turn, ...] = ()  # earlier turns of the conversation, oldest first
    system: str = ""  # the client's own system message (shown after ours)
    asked: str | None = None  # the question as the user put it, when `question` is its standalone form

    @property
    def prompt_question(self) -> str:
        return self.asked if self.asked is not None else self.question

    def context_key(self) -> str:
        """What besides the question shapes the prompt: "" for a lone question; else a digest of the history and
        the client's system message (an answer that depends on them is cached under them)."""
        if not self.history and not self.system:
            return ""
        parts = [self.system, self.prompt_question, *(f"{t.role}:{t.text}" for t in self.history)]
        return hashlib.sha256("\x1f".join(parts).encode("utf-8")).hexdigest()[:32]


@dataclass(slots=True)
class Route:
    engine: str | None  # the engine that answered; None when degraded
    requested: str
    reason: str
    p_large: float | None = None


@dataclass(slots=True, frozen=True)
class Source:
    """A passage given to the model, numbered as the answer cites it."""
    n: int
    document_id: str
    chunk_id: int
    partition: str
    title: str
    source: str
    text: str
    score: float
    file: str = ""  # the file the passage was parsed from, with where in it
    page: int | None = None
    page_end: int | None = None
    section: tuple[str, ...] = ()

    @property
    def citation(self) -> str:
        return citation(self.file, self.page, self.page_end, self.section)


@dataclass(slots=True)
class Usage:
    prompt_tokens: int = 0
    completion_tokens: int = 0
    cached_prompt_tokens: int = 0  # prompt tokens served from the prefix cache
    passages_in_prompt: int | None = None

    @property
    def total_tokens(self) -> int:
        return self.prompt_tokens + self.completion_tokens


@dataclass(slots=True)
class Sources:
    sources: list[Source]
    partitions: list[str]
    route: Route
    standalone_question: str | None = None  # what was searched, when the question was a follow-up


@dataclass(slots=True)
class Token:
    text: str


@dataclass(slots=True)
class Done:
    text: str
    route: Route
    degraded: bool
    finish_reason: str  # stop, length, deadline, degraded, repetition, not_covered, extractive
    usage: Usage
    timings: Timings
    cache: str = "none"  # the layer that answered: exact, semantic or none
    grounding: Grounding | None = None  # the answer checked against its passages; None: not checked


@dataclass(slots=True)
class Failed:
    """The engine died mid-answer; the tokens already sent stand, the rest will not come."""
    message: str
    route: Route


Event = Sources | Token | Done | Failed


class Answerer:
    def __init__(self, retriever: Retriever, engines: EngineSet, routers: Mapping[str, Router],
                 generate: GenerateSettings, routing: RouterSettings, deadline_s: float = 3600.0,
                 conversation: ConversationSettings = ConversationSettings()):
        """`routers`: by the encoder whose embeddings each was trained on; a question goes to the one of the
        encoder for its language (none: by length)."""
        self.retriever, self.engines, self.routers = retriever, engines, dict(routers)
        self.generate, self.routing, self.conversation = generate, routing, conversation
        self.deadline_s = deadline_s  # from the request's arrival to its last token

    async def ask(self, req: AskRequest) -> AsyncIterator[Event]:
        started = time.perf_counter()
        search = self.retriever.search(req.question, req.where, self.generate.passages)
        encoder = self.retriever.encoder_for(req.question)
        router = self.routers.get(encoder)
        if self.engines and req.model == AUTO and router is not None:
            result, query = await asyncio.gather(search, self.retriever.encode(
                normalise_question(req.question), req.where.tenant, encoder=encoder))
            embedding = query.dense
        else:
            result, embedding = await search, None
        timings = result.timings.copy()
        if (uncovered := uncovered_reason(result, req.question, self.generate.min_relevance)) is not None:
            route = Route(None, req.model, uncovered)
            yield Sources([], result.partitions, route)
            timings.set(Stage.TOTAL, ms_since(started))
            yield Token(NOT_COVERED)  # a refusal is text every client shows, streamed or not
            yield Done(NOT_COVERED, route, False, "not_covered", Usage(), timings, grounding=not_checked())
            return
        if self.generate.answer_mode == "extractive":
            async for event in self._extractive(req, result, timings, started):
                yield event
            return
        t = time.perf_counter()
        route, engine = await self._route(req, router, embedding, len(result.hits))
        timings.since(Stage.ROUTE, t)
        yield Sources(sources_of(result.hits), result.partitions, route)
        if engine is None:
            for event in _degraded(result, route, route.reason, timings, started, req.prompt_question):
                yield event
            return
        async for event in self._generate(req, engine, route, result, timings, started):
            yield event

    async def _route(self, req: AskRequest, router: Router | None, embedding,
                     n_passages: int) -> tuple[Route, TextEngine | None]:
        if not self.engines:
            return Route(None, req.model, "generation is turned off (generate.enabled = false)"), None
        if req.model != AUTO:
            preferred, reason, p_large = req.model, "requested by the client", None
        elif router is None:
            words = len(req.question.split())
            preferred = "small" if words <= self.routing.max_words_small else "large"
            reason, p_large = f"no router model: by length ({words} words)", None
        else:
            # features and rule cues scan the question (up to 4,000 characters): CPU work, off the event loop
            decision = await asyncio.to_thread(router.decide, req.question, embedding, self.routing.bias,
                                               self.routing.max_words_small, context_tokens=n_passages * 200)
            preferred, reason, p_large = decision.engine, decision.reason, decision.p_large
        pick = self.engines.pick(preferred, forced=req.model != AUTO)
        if pick.engine is None:
            return Route(None, req.model, f"{reason}; degraded to retrieval only: {pick.reason}", p_large), None
        if pick.reason:
            reason = f"{reason}; {pick.reason}"
        return Route(pick.engine.role, req.model, reason, p_large), pick.engine

    async def _generate(self, req: AskRequest, engine: TextEngine, route: Route, result: SearchResult,
                        timings: Timings, started: float) -> AsyncIterator[Event]:
        t = time.perf_counter()
        max_tokens = min(req.max_tokens or self._default_max_tokens(req.task), engine.limits.max_tokens)
        # room for the system prefix and the question beside the passages and the answer
        budget = max(0, min(engine.limits.context_tokens, engine.limits.max_model_len - max_tokens - PROMPT_RESERVE))
        # tokenising the passages (each cut to what the budget can hold) is CPU work: off the event loop
        prompt = await asyncio.to_thread(self._prompt, engine, req, result, budget)
        timings.since(Stage.PROMPT, t)
        deadline = started + min(req.timeout_s or self.deadline_s, self.deadline_s)
        salt = self.engines.salt_for(req.where.tenant)
        if (no := await declining_odds(engine, prompt.check_text, self.generate.decline_above, req.request_id, salt,
                                       deadline, timings)) is not None:
            for event in _declined(route, no, timings, started):
                yield event
            return
        t = time.perf_counter()
        parts, last, finish = [], None, None
        # quote and refuse may put another text in place of the answer: hold it back until it is checked
        hold = self.generate.check_answers and self.generate.unsupported != "label"
        stream = engine.stream(prompt.text, max_tokens, self.generate.temperature, req.request_id, cache_salt=salt)
        try:
            while True:
                try:
                    delta = await asyncio.wait_for(stream.__anext__(), deadline - time.perf_counter())
                except StopAsyncIteration:  # a loop that showed in the last few deltas is still a loop
                    parts, finish = _stop_loop(parts, finish)
                    break
                except asyncio.TimeoutError:  # the engine's stream was cancelled, which aborts the request
                    finish = "deadline"
                    break
                if last is None:
                    timings.set(Stage.TTFT, ms_since(started))
                last = delta
                if delta.text:
                    parts.append(delta.text)
                    if not hold:
                        yield Token(delta.text)
                    # a loop: stop it here (looked for every few deltas: the check reads 600 characters)
                    if len(parts) % LOOP_CHECK_EVERY == 0:
                        parts, finish = _stop_loop(parts, finish)
                        if finish == "repetition":
                            break
        except EngineDown as exc:
            self.engines.report_dead(engine)
            if last is not None:
                yield Failed(f"{exc}; the answer is incomplete", route)
                return
            async for event in self._retry(req, engine, route, result, timings, started, exc):
                yield event
            return
        finally:
            await stream.aclose()
        timings.since(Stage.GENERATION, t)
        usage = Usage(last.prompt_tokens, last.completion_tokens, last.cached_tokens) if last else Usage()
        usage.passages_in_prompt = prompt.passages_used
        finish = finish or (last.finish_reason if last else None) or "stop"
        async for event in self._checked("".join(parts), hold, req, route, result, usage, finish, timings, started):
            yield event

    async def _checked(self, text: str, held: bool, req: AskRequest, route: Route, result: SearchResult,
                       usage: Usage, finish: str, timings: Timings, started: float) -> AsyncIterator[Event]:
        """The generated text checked against the passages its prompt showed, then done. `held`: nothing of it was
        streamed yet (the policy may replace it), so the checked text goes out now."""
        t = time.perf_counter()
        g = self.generate
        shown = passage_texts(result.hits)[:usage.passages_in_prompt or 0]
        checked = await asyncio.to_thread(check_generated, text, shown, req.prompt_question, g.unsupported,
                                          g.check_answers)
        timings.since(Stage.CHECK, t)
        if held and checked.text:
            yield Token(checked.text)
        timings.set(Stage.TOTAL, ms_since(started))
        yield Done(checked.text, route, False, "unsupported" if checked.replaced else finish, usage, timings,
                   grounding=checked.grounding)

    async def _extractive(self, req: AskRequest, result: SearchResult, timings: Timings,
                          started: float) -> AsyncIterator[Event]:
        """generate.answer_mode = "extractive": no engine; the passages' best sentences, cited."""
        route = Route(None, req.model, "extractive answer (generate.answer_mode)")
        yield Sources(sources_of(result.hits), result.partitions, route)
        t = time.perf_counter()
        checked = await asyncio.to_thread(extractive, result.hits, req.prompt_question)
        timings.since(Stage.CHECK, t)
        text = checked.text or NOT_COVERED
        timings.set(Stage.TOTAL, ms_since(started))
        yield Token(text)
        yield Done(text, route, False, "extractive" if checked.text else "not_covered", Usage(), timings,
                   grounding=checked.grounding)

    async def _retry(self, req: AskRequest, failed: TextEngine, route: Route, result: SearchResult,
                     timings: Timings, started: float, exc: EngineDown) -> AsyncIterator[Event]:
        """Nothing was sent yet: another engine can still answer, else retrieval-only."""
        pick = self.engines.pick(failed.role, exclude=(failed.role,))
        route.reason += f"; {exc}"
        if pick.engine is None:
            route.engine = None
            route.reason += "; degraded to retrieval only"
            for event in _degraded(result, route, str(exc), timings, started, req.prompt_question):
                yield event
            return
        route.engine = pick.engine.role
        async for event in self._generate(req, pick.engine, route, result, timings, started):
            yield event

    def _prompt(self, engine: TextEngine, req: AskRequest, result: SearchResult, budget: int):
        """Passages, the recent history, the client's system message and the question, within `budget` tokens: the
        history gets at most half of it, the client's system message a quarter (cut at its end), and what they and
        a long question take comes out of the passages' share, so the prompt always fits the engine's context."""
        c, tokenizer = self.conversation, engine.tokenizer
        history, used = recent_history(tokenizer, req.history, c.history_turns, min(c.history_tokens, budget // 2))
        system, system_tokens = fit_tokens(tokenizer, req.system, budget // 4)
        # the reserve beside the budget holds our prefix (~170 tokens) and a question of QUESTION_RESERVE_TOKENS;
        # a longer one takes up to another quarter of the budget and is cut past that
        question, question_tokens = fit_tokens(tokenizer, req.prompt_question, QUESTION_RESERVE_TOKENS + budget // 4)
        used += system_tokens + max(0, question_tokens - QUESTION_RESERVE_TOKENS)
        return build_prompt(tokenizer, req.task, self.generate.concise, _passages(result.hits), question,
                            max(0, budget - used), history, system, with_check=self.generate.decline_above < 1)

    def cache_scope(self) -> str:
        """What else than the request decides its answer: the prompt's wording, its passages' budget, the check; an
        extractive answer is none of these (a box switched between the modes does not replay the other's)."""
        if self.generate.answer_mode == "extractive":
            return "extractive"
        return f"{PROMPT_VERSION}|t{self.generate.context_tokens}|d{self.generate.decline_above:g}"

    def _default_max_tokens(self, task: str) -> int:
        return self.generate.max_tokens_concise if task == "concise" else self.generate.max_tokens_cited


def answer_citations(done: Done) -> list[int]:
    """The passages an answer cites; for one that cites none, the best passage of each sentence the check found
    supported (attached to the answer as its citations, never written into its text: a stream has sent it)."""
    if cited := cited_numbers(done.text):
        return cited
    sentences = done.grounding.sentences if done.grounding else ()
    return list(dict.fromkeys(s.passages[0] for s in sentences if s.label == SUPPORTED and s.passages))


def cited_sources(sources: list[Source], done: Done) -> list[Source]:
    """The sources the answer cites (or the check attached); all of them when there are none (a degraded answer,
    or one nothing supports: nothing tells which passages it used)."""
    cited = set(answer_citations(done))
    chosen = [s for s in sources if s.n in cited]
    return chosen or sources


def _stop_loop(parts: list[str], finish: str | None) -> tuple[list[str], str | None]:
    """The answer's parts cut at the first occurrence of a repeated tail, with finish "repetition"; unchanged
    when its end does not repeat."""
    tail = "".join(parts[-200:])
    cut = repeated_tail(tail)
    if cut is None:
        return parts, finish
    text = "".join(parts)
    return [text[:len(text) - len(tail) + cut].rstrip()], "repetition"


def sources_of(hits: list[Hit]) -> list[Source]:
    return [Source(n, c.doc_key, c.chunk_id, h.partition, c.title, c.source, c.text, h.score, c.file, c.page,
                   c.page_end, c.section) for n, h in enumerate(hits, 1) if (c := h.chunk)]


def _passages(hits: list[Hit]) -> list[Passage]:
    return [Passage(c.title, c.text, citation(c.file, c.page, c.page_end, c.section)) for h in hits
            if (c := h.chunk)]


def citation(file: str, page: int | None, page_end: int | None, section: tuple[str, ...]) -> str:
    """Where a passage is, as a person cites it: "report.pdf, p. 12, Methods > Sampling"; "" for a text
    document."""
    parts = [file] if file else []
    if page is not None:
        parts.append(f"pp. {page}-{page_end}" if page_end and page_end != page else f"p. {page}")
    if section:
        parts.append(" > ".join(section))
    return ", ".join(parts)


def _declined(route: Route, odds_of_no: float, timings: Timings, started: float) -> list[Event]:
    route.reason += f"; declined: the model's odds of \"no\" {odds_of_no:.2f} > generate.decline_above"
    timings.set(Stage.TOTAL, ms_since(started))
    return [Token(NOT_COVERED),  # a refusal is text every client shows, streamed or not
            Done(NOT_COVERED, route, False, "not_covered", Usage(), timings, grounding=not_checked())]


def _degraded(result: SearchResult, route: Route, reason: str, timings: Timings, started: float,
              question: str) -> list[Event]:
    """A retrieval-only answer as the events a generated one gives: its text as one token, then done."""
    timings.set(Stage.TOTAL, ms_since(started))
    text = retrieval_only(result.hits, reason, question)
    return [Token(text), Done(text, route, True, "degraded", Usage(), timings, grounding=not_checked())]
