"""The answer sets `eval answers` and bench/answers.py ask: loading them, asking every question through a system
(the product's answer path, or another one a benchmark plugs in), and scoring what came back.

Two folder kinds, told by their files (both BEIR-like: `corpus.jsonl`, `qrels/test.tsv`):
- questions: `queries.jsonl` + `answers.jsonl` ({_id, answers, answerable}), e.g. SQuAD 2.0 and CMRC 2018;
- conversations: `conversations.jsonl` ({id, turns: [{question, answer}]}) with qrels per turn
  (`<conversation id>_<turn number from 1>`), e.g. doc2dial: every turn with a gold answer and a judged document
  is asked, the earlier turns (with the human agent's replies) as its history.
Only a question's text reaches the system: SQuAD's ids tell answerable questions from unanswerable ones.
"""
from __future__ import annotations

import asyncio
import logging
import re
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..answers import AskRequest, Done, Sources
from ..grounding import cited_numbers, says_not_covered, strip_citations
from ..retrieve import PartitionFilter
from ..text import Turn, has_cjk
from ..timings import Stage
from .scoring import Answered, AnswerRow, Gold, sample, score
from .retrieval import beir_documents, load_qrels, read_jsonl

log = logging.getLogger("appliance.evaluate")
TENANT = "eval"
EXAMPLES = 4  # answers kept per run to show what the figures are made of

# (services, question, history, where) -> what the system said
Asker = Callable[[Any, str, tuple[Turn, ...], PartitionFilter], Awaitable[Answered]]


@dataclass(slots=True, frozen=True)
class Ask:
    question: str
    reply: str  # what the conversation's agent said: the next turn's history
    gold: Gold | None  # None: history only, not asked


@dataclass(slots=True, frozen=True)
class Dialogue:
    index: int  # position in the file (the held-out half: index % 2)
    turns: tuple[Ask, ...]  # one for a question set


@dataclass(slots=True, frozen=True)
class AnswerSet:
    name: str  # also its partition's name
    kind: str  # "questions" or "conversations"
    corpus: list[dict]
    dialogues: list[Dialogue]
    total: int  # questions (conversations) in the file, before sampling

    @property
    def questions(self) -> int:
        return sum(1 for d in self.dialogues for t in d.turns if t.gold is not None)

    @property
    def where(self) -> PartitionFilter:
        return PartitionFilter(TENANT, (self.name,))


@dataclass(slots=True)
class SetRun:
    rows: list[AnswerRow]
    examples: list[dict]
    wall_s: float


def set_kind(folder: Path) -> str:
    if (folder / "answers.jsonl").exists():
        return "questions"
    if (folder / "conversations.jsonl").exists():
        return "conversations"
    raise FileNotFoundError(f"{folder}: neither answers.jsonl (questions) nor conversations.jsonl")


def load_set(folder: Path, limit: int | None = None, name: str | None = None) -> AnswerSet:
    """`limit`: questions (a question set) or conversations, sampled evenly (`scoring.sample`)."""
    folder = Path(folder)
    kind = set_kind(folder)
    corpus, qrels = list(read_jsonl(folder / "corpus.jsonl")), load_qrels(folder)
    load = _questions if kind == "questions" else _conversations
    dialogues, total = load(folder, qrels, limit)
    name = name or re.sub(r"[^a-z0-9_-]+", "-", folder.name.lower()).strip("-")[:48] or "answers"
    return AnswerSet(name, kind, corpus, dialogues, total)


def _questions(folder: Path, qrels: dict, limit: int | None) -> tuple[list[Dialogue], int]:
    queries = {str(q["_id"]): q["text"] for q in read_jsonl(folder / "queries.jsonl")}
    golds = list(read_jsonl(folder / "answers.jsonl"))
    chinese = has_cjk(" ".join(queries[str(g["_id"])] for g in golds[:50]))
    dialogues = []
    for i in sample([bool(g.get("answerable", True)) for g in golds], limit):
        g, qid = golds[i], str(golds[i]["_id"])
        gold = Gold(tuple(g["answers"]), bool(g.get("answerable", True)), frozenset(qrels.get(qid) or ()), chinese)
        dialogues.append(Dialogue(i, (Ask(queries[qid], "", gold),)))
    return dialogues, len(golds)


def _conversations(folder: Path, qrels: dict, limit: int | None) -> tuple[list[Dialogue], int]:
    items = list(read_jsonl(folder / "conversations.jsonl"))
    dialogues = []
    for i in sample([True] * len(items), limit):
        turns = []
        for n, turn in enumerate(items[i]["turns"], 1):
            answer, relevant = (turn.get("answer") or "").strip(), qrels.get(f"{items[i]['id']}_{n}") or {}
            gold = Gold((answer,), True, frozenset(relevant), has_cjk(turn["question"])) if answer and relevant \
                else None
            turns.append(Ask(turn["question"], turn.get("answer") or "", gold))
        dialogues.append(Dialogue(i, tuple(turns)))
    return dialogues, len(items)


async def ingest_set(services, answer_set: AnswerSet) -> None:
    docs = beir_documents(answer_set.corpus)
    for start in range(0, len(docs), 64):
        await services.library.ingest(TENANT, answer_set.name, docs[start:start + 64], wait=False)
    await services.library.ingest(TENANT, answer_set.name, [], wait=True)


async def run_set(services, answer_set: AnswerSet, asker: Asker, concurrency: int = 8,
                  progress: Callable[[int, int], None] | None = None) -> SetRun:
    """Every dialogue, `concurrency` at a time (the engines batch them); a conversation's turns one after another."""
    gate, done = asyncio.Semaphore(max(1, concurrency)), [0]
    examples: list[dict] = []

    async def one(dialogue: Dialogue) -> list[AnswerRow]:
        async with gate:
            rows = await _dialogue(services, answer_set, dialogue, asker, examples)
        done[0] += 1
        if progress:
            progress(done[0], len(answer_set.dialogues))
        return rows

    started = time.perf_counter()
    parts = await asyncio.gather(*(one(d) for d in answer_set.dialogues))
    return SetRun([row for part in parts for row in part], examples, time.perf_counter() - started)


async def _dialogue(services, answer_set: AnswerSet, dialogue: Dialogue, asker: Asker,
                    examples: list[dict]) -> list[AnswerRow]:
    rows, history = [], []
    for ask in dialogue.turns:
        if ask.gold is not None:
            try:
                answered = await asker(services, ask.question, tuple(history), answer_set.where)
            except Exception:  # one failure is a wrong answer, not the end of an hour's run
                log.exception("asking %r failed", ask.question)
                answered = Answered("", "", "failed", False, degraded=True)
            row = score(answered, ask.gold, dialogue.index, followup=bool(history))
            rows.append(row)
            if len(examples) < EXAMPLES:
                examples.append({"question": ask.question, "answer": answered.text, "gold": list(ask.gold.answers),
                                 "answerable": ask.gold.answerable, "f1": round(row.f1, 3),
                                 "grounding": answered.grounding, "finish_reason": answered.finish_reason})
        history += [Turn("user", ask.question), Turn("assistant", ask.reply)]
    return rows


def product_asker(max_tokens: int | None = None) -> Asker:
    """The product's answer path (`services.answers`: standalone question, relevance floor, router, prompt,
    engines, grounding check) with its defaults; `max_tokens` None: the product's own."""
    async def ask(services, question: str, history: tuple[Turn, ...], where: PartitionFilter) -> Answered:
        sources, done = None, None
        async for event in services.answers.ask(AskRequest(question, where, max_tokens=max_tokens,
                                                           history=history)):
            if isinstance(event, Sources):
                sources = event
            elif isinstance(event, Done):
                done = event
        return answered_from(done, sources)
    return ask


def answered_from(done: Done | None, sources: Sources | None) -> Answered:
    if done is None:  # the engine died mid-answer (a Failed event): nothing usable came back
        return Answered("", "failed", False, degraded=True)
    ttft = done.timings.get(Stage.TTFT)
    if ttft is None:  # refused, extractive or degraded: the whole answer came at once
        ttft = done.timings.get(Stage.TOTAL)
    label = done.grounding.label if done.grounding is not None else "not_checked"
    found = tuple((s.document_id, s.text) for s in (sources.sources if sources else []))
    abstained = done.finish_reason == "not_covered" or says_not_covered(done.text)
    return Answered(done.text, strip_citations(done.text), done.finish_reason, abstained, found,
                    tuple(cited_numbers(done.text)), label, ttft, done.degraded)
