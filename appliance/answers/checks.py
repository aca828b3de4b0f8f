"""Whether an answer should be generated at all, what happens to it once its text is complete, and the answers made
without an engine.

Before: no passage relevant enough (`generate.min_relevance`), or the model itself, asked whether its passages state
the answer, says no (`generate.decline_above`, off by default): the answer says the documents do not cover it.

A generated answer's citations are validated (a number naming no passage of its prompt is removed), it is checked
against the passages it was given (`appliance.grounding`: each sentence supported, partly or unsupported; an
answer that cites nothing is given the passages that support it as its citations, answer.py), and
`generate.unsupported` decides what an unsupported answer becomes: the answer, labelled (`label`); the passages' own sentences that come closest,
quoted and cited (`quote`); or the words that the documents do not cover it (`refuse`).

Without an engine (`generate.answer_mode = "extractive"`, a degraded box, an overloaded one) the answer is the best
sentences of the best passages, cited: extractive, so it is supported by construction.
"""
from __future__ import annotations

import asyncio
import time
from collections.abc import Sequence
from dataclasses import dataclass

from ..grounding import (NOT_CHECKED, SUPPORTED, UNSUPPORTED, Grounding, SentenceGrounding, check_answer,
                        extractive_answer, supporting_quotes, validate_citations)
from ..generate import EngineDown, TextEngine
from ..retrieve import Hit, SearchResult
from ..text import has_cjk
from ..timings import Stage, Timings

UNSUPPORTED_POLICIES = ("label", "quote", "refuse")
ANSWER_MODES = ("generate", "extractive")
NOT_COVERED = "The documents do not cover this question, so I cannot answer it from them."
QUOTE_LEAD = "The documents do not state this directly. What they say:"


@dataclass(slots=True, frozen=True)
class Checked:
    text: str  # the answer as the client gets it in the end
    grounding: Grounding
    replaced: bool  # the policy put another text in place of the generated one


def check_generated(text: str, passages: Sequence[str], question: str, policy: str, check: bool) -> Checked:
    """`passages`: the texts the prompt showed, numbered from 1 (a citation past them names nothing)."""
    text, _removed = validate_citations(text, len(passages))
    if not check:
        return Checked(text, not_checked(), False)
    grounding = check_answer(text, passages, question)
    if grounding.label != UNSUPPORTED or policy == "label":
        return Checked(text, grounding, False)  # an answer citing nothing gets its support as `cited` (answer.py)
    if policy == "quote" and (quoted := supporting_quotes(grounding, passages, question=question)):
        return Checked(f"{QUOTE_LEAD}\n{quoted}", check_answer(quoted, passages, question), True)
    return Checked(NOT_COVERED, not_checked(), True)


def uncovered_reason(result: SearchResult, question: str, floor: float) -> str | None:
    """Why no answer should be generated from these passages (none relevant enough), or None. The floor
    (generate.min_relevance) was measured on English questions and MiniLM's late-interaction scores; Chinese ones
    (their partitions' USE has no token vectors, so no such score) skip it."""
    if not floor or has_cjk(question):
        return None  # off: the model answers from whatever was found (or from what it knows)
    if not result.hits:
        return "no passage found"
    best = result.hits[0].late
    if best is not None and best < floor:
        return f"no passage relevant enough (best score {best:.2f} < generate.min_relevance {floor:g})"
    return None


async def declining_odds(engine: TextEngine, check_prompt: str, above: float, request_id: str | None,
                         cache_salt: str | None, deadline: float, timings: Timings) -> float | None:
    """generate.decline_above < 1: the model is asked whether its passages state the answer (the prompt's
    check_text); its share of "no" against "yes" when over `above` (the answer is then declined), else None. It
    could not say (the engine down, out of time, neither word a likely first token): the answer is generated as
    without the check."""
    if above >= 1 or not check_prompt:
        return None
    t = time.perf_counter()
    try:
        yes, no = await asyncio.wait_for(engine.next_word_odds(check_prompt, ("yes", "no"), request_id, cache_salt),
                                         max(deadline - t, 0.001))
    except (EngineDown, asyncio.TimeoutError):
        return None
    finally:
        timings.since(Stage.ANSWERABLE, t)
    share = no / (yes + no) if yes + no > 0 else 0.0
    return share if share > above else None


def extractive(hits: list[Hit], question: str) -> Checked:
    """The best sentences of the best passages, cited; "" when no sentence shares a term with the question."""
    passages = passage_texts(hits)
    found = extractive_answer(question, passages)
    if not found.text:
        return Checked("", not_checked(), False)
    return Checked(found.text, check_answer(found.text, passages, question), False)


def retrieval_only(hits: list[Hit], reason: str, question: str) -> str:
    """A degraded answer: the reason, then the passages' sentences that answer best (the passages themselves when
    none shares a term with the question)."""
    head = f"No generated answer ({reason})."
    found = extractive_answer(question, passage_texts(hits)) if question else None
    if found is not None and found.text:
        return f"{head} From the documents:\n{found.text}"
    lines = [f"{head} The most relevant passages:"]
    for n, hit in enumerate(hits, 1):
        snippet = " ".join(hit.chunk.text.split())[:300]
        lines.append(f"[{n}] {hit.chunk.title + ': ' if hit.chunk.title else ''}{snippet}")
    if not hits:
        lines.append("(no passages matched)")
    return "\n".join(lines)


def passage_texts(hits: list[Hit]) -> list[str]:
    return [h.chunk.text for h in hits if h.chunk]


def not_checked() -> Grounding:
    return Grounding(NOT_CHECKED, (), ())


def grounding_json(g: Grounding | None) -> dict:
    return (g or not_checked()).to_json()


def grounding_from_json(data: dict | None) -> Grounding | None:
    """A cached answer's grounding as stored (plain data: the cache must read it back whatever the classes
    became); None for entries stored before answers were checked."""
    if not data:
        return None
    sentences = tuple(SentenceGrounding(s["text"], s["label"], tuple(s["passages"]), float(s["score"]))
                      for s in data.get("sentences", ()))
    return Grounding(data["label"], tuple(data.get("passages", ())), sentences)


def supported(g: Grounding | None) -> bool:
    return g is not None and g.label == SUPPORTED
