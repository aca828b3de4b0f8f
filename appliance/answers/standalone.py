"""The standalone-question stage: a follow-up ("Is it treatable?") made into a question that retrieval, the router
and the caches can use on their own ("Is psoriasis treatable?").

First turns go as they are. A follow-up is, by default, expanded with the salient terms of the earlier turns; in
`auto` only one that leans on the conversation is (or it is rewritten by the rewrite engine: a stable, versioned
prompt whose prefix stays cached, bounded in tokens and time). A rewrite that cannot be had (engine off, down,
busy, too slow, failing) or that comes back unusable falls back to the expansion. What `conversation.standalone`
and `conversation.followup` pick is measured in bench/results/conversations.md.
"""
from __future__ import annotations

import asyncio
import dataclasses
import logging
import time
from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass
from typing import Protocol

from ..config import ConversationSettings
from ..generate import EngineDown, EngineSet, rewrite_prompt
from ..text import Turn, depends_on_history, expand_question, history_query
from ..timings import Stage, ms_since
from .answer import AskRequest, Done, Event, Sources

log = logging.getLogger("appliance.standalone")
REWRITE_TURNS = 6  # earlier messages the rewrite prompt shows (each cut to REWRITE_TURN_CHARS)
MAX_REWRITE_QUESTION_CHARS = 600


class Answers(Protocol):
    def ask(self, req: AskRequest) -> AsyncIterator[Event]: ...


@dataclass(slots=True, frozen=True)
class Standalone:
    text: str
    method: str  # first_turn, as_is, raw, history, expand, rewrite, expand_fallback
    ms: float = 0.0


class StandaloneQuestions:
    def __init__(self, engines: EngineSet, settings: ConversationSettings):
        self.engines, self.settings = engines, settings

    async def resolve(self, question: str, history: Sequence[Turn], mode: str | None = None,
                      tenant: str | None = None) -> Standalone:
        """The question to search, route and cache by. `mode` overrides `conversation.standalone` (evaluation)."""
        started = time.perf_counter()
        mode = mode or self.settings.standalone
        earlier = [t for t in history if t.text.strip()]
        if not earlier:
            return Standalone(question, "first_turn")
        if mode == "auto":
            if not await asyncio.to_thread(depends_on_history, question):
                return Standalone(question, "as_is", ms_since(started))
            mode = self.settings.followup
        if mode == "raw":
            return Standalone(question, "raw")
        if mode == "history":
            # the whole conversation glued on: the naive peer that the expansion and the rewrite are measured against
            return Standalone(history_query(question, earlier, max_turns=None, answers=True), "history",
                              ms_since(started))
        if mode == "rewrite" and len(question) > MAX_REWRITE_QUESTION_CHARS:
            mode = "expand"  # a question this long names its own topic; the expansion adds what it may lack
        if mode == "rewrite":
            rewritten = await self._rewrite(question, earlier, tenant)
            if rewritten is not None:
                return Standalone(rewritten, "rewrite", ms_since(started))
            expanded = await asyncio.to_thread(expand_question, question, earlier)
            return Standalone(expanded, "expand_fallback", ms_since(started))
        return Standalone(await asyncio.to_thread(expand_question, question, earlier), "expand", ms_since(started))

    async def _rewrite(self, question: str, history: list[Turn], tenant: str | None) -> str | None:
        # forced: a rewrite the rewrite engine cannot take now is expanded, not sent to the (slower) other engine
        pick = self.engines.pick(self.settings.rewrite_engine, forced=True) if self.engines else None
        if pick is None or pick.engine is None:
            return None
        engine = pick.engine
        recent = history[-REWRITE_TURNS:]
        prompt = await asyncio.to_thread(rewrite_prompt, engine.tokenizer, recent, question)
        try:
            text = await asyncio.wait_for(self._generate(engine, prompt, self.engines.salt_for(tenant)),
                                          self.settings.rewrite_timeout_s)
        except (asyncio.TimeoutError, EngineDown) as exc:
            log.info("rewrite fell back to expansion: %s", type(exc).__name__)
            return None
        except Exception:  # anything else the engine raises must not fail the answer: the expansion still works
            log.warning("rewrite failed; fell back to expansion", exc_info=True)
            return None
        return usable_rewrite(text, question)

    async def _generate(self, engine, prompt: str, cache_salt: str | None) -> str:
        parts: list[str] = []
        stream = engine.stream(prompt, self.settings.rewrite_max_tokens, 0.0, cache_salt=cache_salt)
        try:
            async for delta in stream:
                parts.append(delta.text)
                if "\n" in delta.text:  # one line asked for: the rest is not the question
                    break
        finally:
            await stream.aclose()
        return "".join(parts)


def usable_rewrite(text: str, question: str) -> str | None:
    """The rewrite's first line without quotes or a label, or None when it is empty or far longer than the
    conversation could justify. An answer written in its place is not caught (SmolLM2 often does that: see
    bench/results/conversations.md), which is one reason the default is the expansion."""
    line = text.strip().split("\n", 1)[0].strip().strip('"“”\'').strip()
    for label in ("Standalone question:", "Rewritten question:", "Question:"):
        if line.lower().startswith(label.lower()):
            line = line[len(label):].strip()
    if len(line) < 3 or len(line) > 3 * len(question) + 200:
        return None
    return line


class FollowUpAnswers:
    """The answer path with the stage in front: retrieval, the router and the caches get the standalone question;
    the prompt still shows the question as it was asked, after the conversation."""

    def __init__(self, inner: Answers, questions: StandaloneQuestions):
        self.inner, self.questions = inner, questions

    async def ask(self, req: AskRequest) -> AsyncIterator[Event]:
        standalone = await self.questions.resolve(req.question, req.history, tenant=req.where.tenant)
        inner = dataclasses.replace(req, question=standalone.text, asked=req.question)
        async for event in self.inner.ask(inner):
            if isinstance(event, Sources):
                event.standalone_question = standalone.text
            elif isinstance(event, Done) and req.history:
                event.timings.set(Stage.REWRITE, standalone.ms)
            yield event
