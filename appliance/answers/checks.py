"""What happens to an answer once its text is complete, and the answers made without an engine.

A generated answer's citations are validated (a number naming no passage of its prompt is removed), it is checked
against the passages it was given (`appliance.grounding`: each sentence supported, partly or unsupported; an
answer that cites nothing is given the passages that support it as its citations, answer.py), and `generate.unsupported` decides what an
unsupported answer becomes: the answer, labelled (`label`); the passages' own sentences that come closest,
quoted and cited (`quote`); or the words that the documents do not cover it (`refuse`).

Without an engine (`generate.answer_mode = "extractive"`, a degraded box, an overloaded one) the answer is the best
sentences of the best passages, cited: extractive, so it is supported by construction.
"""
from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from ..grounding import (NOT_CHECKED, SUPPORTED, UNSUPPORTED, Grounding, SentenceGrounding, check_answer,
                        extractive_answer, supporting_quotes, validate_citations)
from ..retrieve import Hit

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
