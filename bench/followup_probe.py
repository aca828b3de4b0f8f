"""Probe of the follow-up stage's non-LLM part (appliance/text/followup.py): rewrite F1 against human rewrites
(TREC CAsT 2019, CANARD), detection recall/false positives, and doc2dial retrieval with the real stack in-process.

    .venv/bin/python bench/followup_probe.py                 # everything (ingest of doc2dial: a few minutes)
    .venv/bin/python bench/followup_probe.py --no-retrieval  # rewrite F1 and detection only (seconds)
    .venv/bin/python bench/followup_probe.py --conversations 40

Prints compact tables; writes nothing (the index lives in a temporary folder).
"""
from __future__ import annotations

import argparse
import asyncio
import csv
import json
import re
import statistics
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

from appliance.config import load_settings  # noqa: E402  (onnxruntime before usearch: see MODELS.md)
from appliance.evaluate import beir_documents, mrr_at, ndcg_at, recall_at
from appliance.retrieve import PartitionFilter
from appliance.text import followup
from appliance.text.tokenize import ENGLISH_STOP_WORDS
from appliance.text.followup import Turn, depends_on_history, expand_question, history_query
from appliance.wiring import open_services

DATA = Path("/work/shared/data")
MODELS = Path(__file__).resolve().parent.parent / "models"
TENANT, PARTITION = "probe", "doc2dial"
_TOKEN = re.compile(r"\w+")


def read_jsonl(path: Path) -> list[dict]:
    with open(path, encoding="utf-8") as f:
        return [json.loads(line) for line in f if line.strip()]


def token_f1(candidate: str, reference: str) -> float:
    cand, ref = Counter(_TOKEN.findall(candidate.lower())), Counter(_TOKEN.findall(reference.lower()))
    common = sum((cand & ref).values())
    if not common:
        return 0.0
    precision, recall = common / sum(cand.values()), common / sum(ref.values())
    return 2 * precision * recall / (precision + recall)


def same_text(a: str, b: str) -> bool:
    return _TOKEN.findall(a.lower()) == _TOKEN.findall(b.lower())


def rewrite_history(row: dict, with_title: bool = False) -> list[Turn]:
    """User turns, each followed by its answer where the set has one (CANARD); CAsT has questions only."""
    turns = [Turn("user", f"{row['title']} {row['section']}")] if with_title else []
    answers = row.get("history_answers") or []
    for i, question in enumerate(row["history"]):
        turns.append(Turn("user", question))
        if i < len(answers) and answers[i] and answers[i] != "CANNOTANSWER":
            turns.append(Turn("assistant", answers[i]))
    return turns


def rewrite_modes() -> dict:
    return {
        "raw": lambda q, h: q,
        "history_query": lambda q, h: history_query(q, h),
        "expand (12)": lambda q, h: expand_question(q, h, 12),
        "expand (4)": lambda q, h: expand_question(q, h, 4),
        "expand (2)": lambda q, h: expand_question(q, h, 2),
        "auto expand (4)": lambda q, h: expand_question(q, h, 4) if depends_on_history(q) else q,
    }


def rewrite_table(name: str, rows: list[dict], with_title: bool = False) -> None:
    follow = [r for r in rows if r["history"]]
    print(f"\n## {name}{' (title+section as turn 0)' if with_title else ''}: rewrite F1 vs human rewrite, "
          f"{len(follow)} follow-up turns ({sum(not same_text(r['raw'], r['rewrite']) for r in follow)} rewritten)")
    print(f"{'mode':<18} {'F1 all':>7} {'F1 rewritten':>13} {'F1 unchanged':>13} {'words':>6} {'added':>6}")
    for mode, make in rewrite_modes().items():
        scores, changed, kept, words, added = [], [], [], [], []
        for r in follow:
            cand = make(r["raw"], rewrite_history(r, with_title))
            f1 = token_f1(cand, r["rewrite"])
            scores.append(f1)
            (kept if same_text(r["raw"], r["rewrite"]) else changed).append(f1)
            words.append(len(_TOKEN.findall(cand)))
            gained = added_words(r["raw"], r["rewrite"])
            if gained:
                added.append(len(gained & set(_TOKEN.findall(cand.lower()))) / len(gained))
        print(f"{mode:<18} {mean(scores):>7.3f} {mean(changed):>13.3f} {mean(kept):>13.3f} {mean(words):>6.1f} "
              f"{mean(added):>6.3f}")


def added_words(raw: str, rewrite: str) -> set[str]:
    """The content words the human rewrite added: what a standalone form must bring in from the history."""
    have = set(_TOKEN.findall(raw.lower()))
    return {w for w in _TOKEN.findall(rewrite.lower()) if w not in have and w not in ENGLISH_STOP_WORDS}


def detection_table(sets: dict[str, list[dict]]) -> None:
    print("\n## depends_on_history on follow-up turns: flagged share of rewritten (recall) / unchanged (false pos.)")
    print(f"{'short<=':<8} " + " ".join(f"{n + ' recall':>15} {n + ' FP':>11}" for n in sets))
    original = followup.SHORT_CONTENT_WORDS
    try:
        for short in (0, 1, 2, 3):
            followup.SHORT_CONTENT_WORDS = short
            cells = []
            for rows in sets.values():
                follow = [r for r in rows if r["history"]]
                changed = [r for r in follow if not same_text(r["raw"], r["rewrite"])]
                kept = [r for r in follow if same_text(r["raw"], r["rewrite"])]
                cells.append(f"{share(changed):>15.3f} {share(kept):>11.3f}")
            print(f"{short:<8} " + " ".join(cells) + ("   <- default" if short == original else ""))
    finally:
        followup.SHORT_CONTENT_WORDS = original
    for name, rows in sets.items():
        kept = [r["raw"] for r in rows if r["history"] and same_text(r["raw"], r["rewrite"])
                and depends_on_history(r["raw"])]
        missed = [r["raw"] for r in rows if r["history"] and not same_text(r["raw"], r["rewrite"])
                  and not depends_on_history(r["raw"])]
        print(f"  {name} false positives e.g.: {kept[:4]}")
        print(f"  {name} misses e.g.: {missed[:4]}")


def share(rows: list[dict]) -> float:
    return sum(depends_on_history(r["raw"]) for r in rows) / len(rows) if rows else 0.0


def mean(values: list[float]) -> float:
    return statistics.fmean(values) if values else 0.0


# --- doc2dial retrieval ----------------------------------------------------------------------------------------
def doc2dial_turns(limit: int | None) -> list[tuple[str, str, list[Turn]]]:
    """(qrel id, question, history) for every judged user turn; history = earlier questions and answers."""
    folder = DATA / "doc2dial_conversations"
    out = []
    for conv in read_jsonl(folder / "conversations.jsonl")[:limit]:
        history: list[Turn] = []
        for k, turn in enumerate(conv["turns"], start=1):
            out.append((f"{conv['id']}_{k}", turn["question"], list(history)))
            history.append(Turn("user", turn["question"]))
            if turn["answer"]:
                history.append(Turn("assistant", turn["answer"]))
    return out


def read_qrels(path: Path) -> dict[str, dict[str, int]]:
    qrels: dict[str, dict[str, int]] = {}
    with open(path, encoding="utf-8") as f:
        for row in list(csv.reader(f, delimiter="\t"))[1:]:
            qrels.setdefault(row[0], {})[row[1]] = int(row[2])
    return qrels


RETRIEVAL_MODES = {
    "raw": lambda q, h: q,
    "history_query": lambda q, h: history_query(q, h),
    "expand_question": lambda q, h: expand_question(q, h),
    "expand (4)": lambda q, h: expand_question(q, h, 4),
    "auto": lambda q, h: expand_question(q, h) if depends_on_history(q) else q,
    "auto-history": lambda q, h: history_query(q, h) if depends_on_history(q) else q,
    "auto-mix": lambda q, h: expand_question(q, h, 12 if depends_on_history(q) else 4),
}
GROUPS = ("first", "follow-up", "- flagged", "- unflagged")


async def retrieval_table(limit: int | None) -> None:
    folder = DATA / "doc2dial_conversations"
    qrels = read_qrels(folder / "qrels" / "test.tsv")
    turns = [t for t in doc2dial_turns(limit) if t[0] in qrels]
    corpus = read_jsonl(folder / "corpus.jsonl")
    with tempfile.TemporaryDirectory(prefix="followup-probe-") as tmp:
        settings = load_settings(env={"APPLIANCE_DATA_DIR": tmp, "APPLIANCE_MODELS_DIR": str(MODELS),
                                      "APPLIANCE_DEMO_CORPUS": "false", "APPLIANCE_GENERATE_ENABLED": "false"})
        async with open_services(settings, warm_up=False, generation=False) as services:
            started = time.perf_counter()
            await services.library.ingest(TENANT, PARTITION, beir_documents(corpus), wait=True)
            print(f"\n(ingested {len(corpus)} documents in {time.perf_counter() - started:.0f} s)", file=sys.stderr)
            ranked: dict[str, list[str]] = {}  # query text -> doc ids: modes often agree on the text
            where = PartitionFilter(TENANT)
            results: dict[str, dict[str, list[tuple[float, float, float]]]] = {}
            for qid, question, history in turns:
                groups = ["first"] if not history else [
                    "follow-up", "- flagged" if depends_on_history(question) else "- unflagged"]
                for mode, make in RETRIEVAL_MODES.items():
                    text = make(question, history)
                    if text not in ranked:
                        page = await services.retriever.search(text, where, k=10)
                        ranked[text] = list(dict.fromkeys(h.chunk.doc_key for h in page.hits))
                    docs, rel = ranked[text], qrels[qid]
                    for group in groups:
                        results.setdefault(group, {}).setdefault(mode, []).append(
                            (recall_at(docs, rel, 10), ndcg_at(docs, rel, 10), mrr_at(docs, rel, 10)))
    flagged = [depends_on_history(q) for _, q, h in turns if h]
    print(f"\n## doc2dial retrieval (doc-level, k=10), {len(turns)} judged turns; depends_on_history flags "
          f"{sum(flagged)}/{len(flagged)} follow-ups")
    print(f"{'turns':<12} {'mode':<16} {'n':>5} {'R@10':>6} {'nDCG@10':>8} {'MRR@10':>7}")
    for group in GROUPS:
        modes = results.get(group, {})
        for mode, rows in (modes.items() if group != "first" else list(modes.items())[:1]):  # first: all equal
            r, n, m = (mean([row[i] for row in rows]) for i in range(3))
            print(f"{group:<12} {mode if group != 'first' else '(any mode)':<16} {len(rows):>5} {r:>6.3f} "
                  f"{n:>8.3f} {m:>7.3f}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--no-retrieval", action="store_true")
    parser.add_argument("--conversations", type=int, default=None, help="only the first N doc2dial dialogues")
    args = parser.parse_args()
    cast = read_jsonl(DATA / "cast2019_rewrites" / "rewrites.jsonl")
    canard = read_jsonl(DATA / "canard_rewrites" / "rewrites.jsonl")
    rewrite_table("CAsT 2019", cast)
    rewrite_table("CANARD dev", canard)
    rewrite_table("CANARD dev", canard, with_title=True)
    detection_table({"CAsT": cast, "CANARD": canard})
    if not args.no_retrieval:
        asyncio.run(retrieval_table(args.conversations))


if __name__ == "__main__":
    main()
