"""`appliance eval conversations`: retrieval for every turn of multi-turn conversations, first turns and follow-ups
apart, with the standalone-question stage in a chosen mode; `--rewrites`: our standalone questions against human
rewrites (token F1). Top level: it uses the services and the engines as the server does.

A conversation folder holds `corpus.jsonl` (BEIR), `conversations.jsonl` ({id, turns: [{question, answer}]}) and
`qrels/test.tsv` with one row per turn, `<conversation id>_<turn number from 1>` -> its document.
"""
from __future__ import annotations

import re
import tempfile
import time
from collections import Counter
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np

from ..config import Settings
from ..retrieve import PartitionFilter
from ..text import Turn
from ..wiring import open_services
from .retrieval import beir_documents, load_qrels, mrr_at, ndcg_at, read_jsonl, recall_at

TENANT, PARTITION = "eval", "conversations"
MODES = ("raw", "history", "expand", "rewrite", "auto")
_WORD = re.compile(r"\w+", re.UNICODE)


def needs_engines(settings: Settings, mode: str) -> bool:
    """Whether `mode` (auto: what the settings do) can ask the rewrite engine."""
    c = settings.conversation
    chosen = c.standalone if mode == "auto" else mode
    return chosen == "rewrite" or (chosen == "auto" and c.followup == "rewrite")


async def evaluate_conversations(settings: Settings, folder: Path, modes: Sequence[str] = ("auto",),
                                 progress=None) -> list[dict[str, Any]]:
    """One report per mode; the corpus is ingested once."""
    folder = Path(folder)
    corpus, qrels = list(read_jsonl(folder / "corpus.jsonl")), load_qrels(folder)
    conversations = list(read_jsonl(folder / "conversations.jsonl"))
    with tempfile.TemporaryDirectory(prefix="appliance-eval-") as tmp:
        fresh = replace(settings, data_dir=Path(tmp), demo_corpus=False)
        engines = any(needs_engines(settings, mode) for mode in modes)
        async with open_services(fresh, warm_up=False, generation=engines) as services:
            await _ingest(services, corpus)
            return [await _score_mode(services, conversations, qrels, mode, progress) for mode in modes]


async def _ingest(services, corpus: list[dict]) -> None:
    docs = beir_documents(corpus)
    for start in range(0, len(docs), 64):
        await services.library.ingest(TENANT, PARTITION, docs[start:start + 64], wait=False)
    await services.library.ingest(TENANT, PARTITION, [], wait=True)


async def _score_mode(services, conversations: list[dict], qrels: dict, mode: str, progress) -> dict[str, Any]:
    scores: dict[str, list[tuple[float, float, float]]] = {"first_turn": [], "followup": []}
    rewrite_ms: list[float] = []
    for n, conversation in enumerate(conversations):
        history: list[Turn] = []
        for i, turn in enumerate(conversation["turns"], 1):
            relevant = qrels.get(f"{conversation['id']}_{i}")
            if relevant:
                standalone = await services.questions.resolve(turn["question"], history, mode=_mode(mode))
                if history:
                    rewrite_ms.append(standalone.ms)
                page = await services.retriever.search(standalone.text, PartitionFilter(TENANT), k=30)
                ranked = list(dict.fromkeys(h.chunk.doc_key for h in page.hits))
                scores["followup" if history else "first_turn"].append(
                    (recall_at(ranked, relevant, 10), ndcg_at(ranked, relevant), mrr_at(ranked, relevant)))
            history += [Turn("user", turn["question"]), Turn("assistant", turn.get("answer") or "")]
        if progress:
            progress(n + 1, len(conversations))
    return {"mode": mode, "turns": sum(map(len, scores.values())), "followups": len(scores["followup"]),
            **{kind: _means(rows) for kind, rows in scores.items()},
            "rewrite_p50_ms": _percentile(rewrite_ms, 50), "rewrite_p99_ms": _percentile(rewrite_ms, 99)}


async def evaluate_rewrites(settings: Settings, path: Path, mode: str = "auto", limit: int | None = None,
                            progress=None) -> dict[str, Any]:
    """Mean token F1 of our standalone questions, and of the raw follow-ups, against the human rewrites."""
    rows = list(read_jsonl(Path(path)))[:limit]
    ours, raw, spent = [], [], []
    with tempfile.TemporaryDirectory(prefix="appliance-eval-") as tmp:
        fresh = replace(settings, data_dir=Path(tmp), demo_corpus=False)
        async with open_services(fresh, warm_up=False, generation=needs_engines(settings, mode)) as services:
            for n, row in enumerate(rows):
                history = _history(row)
                started = time.perf_counter()
                standalone = await services.questions.resolve(row["raw"], history, mode=_mode(mode))
                spent.append((time.perf_counter() - started) * 1000)
                ours.append(token_f1(standalone.text, row["rewrite"]))
                raw.append(token_f1(row["raw"], row["rewrite"]))
                if progress:
                    progress(n + 1, len(rows))
    return {"mode": mode, "pairs": len(rows), "f1": round(float(np.mean(ours)), 4) if ours else 0.0,
            "raw_f1": round(float(np.mean(raw)), 4) if raw else 0.0, "p50_ms": _percentile(spent, 50),
            "p99_ms": _percentile(spent, 99)}


def token_f1(candidate: str, reference: str) -> float:
    a, b = Counter(_WORD.findall(candidate.lower())), Counter(_WORD.findall(reference.lower()))
    common = sum((a & b).values())
    if not common:
        return 0.0
    precision, recall = common / sum(a.values()), common / sum(b.values())
    return 2 * precision * recall / (precision + recall)


def _history(row: dict) -> list[Turn]:
    """CAsT rows give the earlier questions; CANARD rows their answers too (`history_answers`)."""
    answers = row.get("history_answers") or []
    turns: list[Turn] = []
    for i, question in enumerate(row.get("history") or []):
        turns.append(Turn("user", question))
        if i < len(answers) and answers[i]:
            turns.append(Turn("assistant", answers[i]))
    return turns


def _mode(mode: str) -> str | None:
    return None if mode == "auto" else mode  # auto: what the settings make the product do


def _means(rows: list[tuple[float, float, float]]) -> dict[str, float]:
    if not rows:
        return {"recall@10": 0.0, "ndcg@10": 0.0, "mrr@10": 0.0}
    recall, ndcg, mrr = (round(float(np.mean(column)), 4) for column in zip(*rows))
    return {"recall@10": recall, "ndcg@10": ndcg, "mrr@10": mrr}


def _percentile(values: list[float], q: float) -> float:
    return round(float(np.percentile(values, q)), 2) if values else 0.0
