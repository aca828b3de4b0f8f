"""`appliance eval answers`: every turn of a conversation folder answered through the real engines, as the server
answers it (standalone question, retrieval, the recent history in the prompt), against the gold answers.

Reports token F1 and exact match, how often the passage the answer cites comes from the turn's document, how
often the top source does, the shares of answers stopped as loops and refused as not covered by the documents
(`generate.min_relevance`), and answers per minute. Caches are off: every
answer is computed. Slow on a CPU box (an answer is seconds): for benchmarks, not tests.
"""
from __future__ import annotations

import re
import tempfile
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np

from .answer import AskRequest, Done, Sources, cited_numbers, strip_citations
from .config import Settings
from .evaluate import load_qrels, read_jsonl
from .evaluate_conversations import PARTITION, TENANT, _ingest, token_f1
from .retrieve import PartitionFilter
from .text import Turn
from .wiring import open_services

async def evaluate_answers(settings: Settings, folder: Path, history_in_prompt: bool = True,
                           limit: int | None = None, max_tokens: int = 96, progress=None) -> dict[str, Any]:
    folder = Path(folder)
    corpus, qrels = list(read_jsonl(folder / "corpus.jsonl")), load_qrels(folder)
    conversations = list(read_jsonl(folder / "conversations.jsonl"))[:limit]
    conversation = settings.conversation if history_in_prompt else replace(settings.conversation, history_turns=0)
    with tempfile.TemporaryDirectory(prefix="appliance-eval-") as tmp:
        fresh = replace(settings, data_dir=Path(tmp), demo_corpus=False, conversation=conversation,
                        cache=replace(settings.cache, enabled=False))
        async with open_services(fresh, warm_up=True, generation=True) as services:
            await _ingest(services, corpus)
            started = time.perf_counter()
            rows = []
            for n, item in enumerate(conversations):
                rows += await _answer_conversation(services, item, qrels, max_tokens)
                if progress:
                    progress(n + 1, len(conversations))
            minutes = (time.perf_counter() - started) / 60
    return {"history_in_prompt": history_in_prompt, "conversations": len(conversations), "answers": len(rows),
            **_summary(rows), "answers_per_min": round(len(rows) / minutes, 2) if minutes else 0.0}


async def _answer_conversation(services, item: dict, qrels: dict, max_tokens: int) -> list[dict[str, Any]]:
    rows: list[dict[str, Any]] = []
    history: list[Turn] = []
    for i, turn in enumerate(item["turns"], 1):
        relevant = qrels.get(f"{item['id']}_{i}") or {}
        gold = (turn.get("answer") or "").strip()
        if gold and relevant:
            req = AskRequest(turn["question"], PartitionFilter(TENANT, (PARTITION,)), max_tokens=max_tokens,
                             history=tuple(history))
            sources, done = None, None
            async for event in services.answers.ask(req):
                if isinstance(event, Sources):
                    sources = event
                elif isinstance(event, Done):
                    done = event
            if sources is not None and done is not None:
                rows.append(_row(done, sources, gold, set(relevant), bool(history)))
        history += [Turn("user", turn["question"]), Turn("assistant", turn.get("answer") or "")]
    return rows


def _row(done: Done, sources: Sources, gold: str, relevant: set[str], followup: bool) -> dict[str, Any]:
    by_number = {s.n: s.document_id for s in sources.sources}
    cited = {by_number[n] for n in cited_numbers(done.text) if n in by_number}
    return {"f1": token_f1(done.text, gold), "em": _normal(done.text) == _normal(gold), "cites": bool(cited),
            "cited_right": bool(cited & relevant), "top_right": bool(sources.sources)
            and sources.sources[0].document_id in relevant, "loop": done.finish_reason == "repetition",
            "degraded": done.degraded, "not_covered": done.finish_reason == "not_covered", "followup": followup}


def _summary(rows: list[dict[str, Any]]) -> dict[str, Any]:
    def mean(key: str, subset: list[dict[str, Any]]) -> float:
        return round(float(np.mean([float(r[key]) for r in subset])), 4) if subset else 0.0
    followups = [r for r in rows if r["followup"]]
    return {"f1": mean("f1", rows), "exact_match": mean("em", rows), "followup_f1": mean("f1", followups),
            "share_citing": mean("cites", rows), "citation_accuracy": mean("cited_right", rows),
            "top_source_accuracy": mean("top_right", rows), "loops": mean("loop", rows),
            "degraded": mean("degraded", rows), "not_covered": mean("not_covered", rows)}


def _normal(text: str) -> str:
    return " ".join(re.findall(r"\w+", strip_citations(text).lower()))
