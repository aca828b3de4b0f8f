"""The relevance floor (generate.min_relevance): how high the best passage's late-interaction score is for questions
the documents answer, and for questions they do not, on one index; what each floor would keep and refuse.

Answerable: SciFact test claims over a slice of SciFact holding their judged abstracts (+ 400 distractors).
Off-topic over the same index: router_questions (NQ, HotpotQA, GSM8K, HumanEval) and doc2dial first turns.
Writes bench/results/grounding.md (+ .json)."""
from __future__ import annotations

import asyncio
import json
import random
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))
from machine import REPO, machine_info, progress_log, write_results  # noqa: E402
from support import DATA, SCIFACT, beir_slice  # noqa: E402

from appliance.config import GenerateSettings, load_settings  # noqa: E402
from appliance.evaluate import beir_documents  # noqa: E402
from appliance.retrieve import PartitionFilter  # noqa: E402
from appliance.wiring import open_services  # noqa: E402

FLOORS = (0.35, 0.40, 0.42, 0.45, 0.48, 0.50)
OUT = REPO / "bench" / "results" / "grounding"


async def scores(log) -> dict[str, list[float]]:
    data = beir_slice(SCIFACT, queries=150, distractors=400)
    general = [json.loads(line)["text"] for line in open(DATA / "router_questions" / "questions.jsonl")]
    random.Random(0).shuffle(general)
    d2d = [json.loads(line)["turns"][0]["question"]
           for line in open(DATA / "doc2dial_conversations" / "conversations.jsonl")]
    with tempfile.TemporaryDirectory() as tmp:
        settings = load_settings(env={"APPLIANCE_DATA_DIR": tmp, "APPLIANCE_MODELS_DIR": str(REPO / "models"),
                                      "APPLIANCE_DEMO_CORPUS": "false", "APPLIANCE_GENERATE_ENABLED": "false",
                                      "APPLIANCE_LOG_LEVEL": "warning"})
        async with open_services(settings, warm_up=False, generation=False) as services:
            await services.library.ingest("t", "p", beir_documents(data.corpus))
            log(f"indexed {len(data.corpus)} abstracts")

            async def best(question: str) -> float:
                hits = (await services.retriever.search(question, PartitionFilter("t"), k=5)).hits
                return float(hits[0].late) if hits and hits[0].late is not None else 0.0
            found = {"answerable (SciFact claims)": [await best(q) for q in data.queries.values()],
                     "off-topic (router_questions)": [await best(q) for q in general[:200]],
                     "off-topic (doc2dial first turns)": [await best(q) for q in d2d[:150]]}
            corpus = [json.loads(line) for line in open(DATA / "doc2dial_conversations" / "corpus.jsonl")]
            await services.library.ingest("d2d", "p", beir_documents(corpus))
            log(f"indexed {len(corpus)} doc2dial pages")
            found["answerable (doc2dial first turns, own corpus)"] = [
                (await services.retriever.search(q, PartitionFilter("d2d"), k=5)).hits[0].late for q in d2d[:150]]
            return found


def markdown(results: dict) -> str:
    m = results["meta"]
    lines = ["# Relevance floor (generate.min_relevance)", "",
             f"- Command: `{m['command']}`", f"- Date: {m['date']}; commit {m['commit']}",
             f"- Machine: {m['cpu_model']} ({', '.join(m['cpu_simd'])}), {m['cores']} cores; wall {m['wall_s']} s",
             "- Score: late-interaction (MaxSim, MiniLM token vectors) score of the best passage of a search (k=5).",
             "", "| questions | n | p1 | p5 | p25 | p50 | p75 | p95 | p99 |", "|---|---|---|---|---|---|---|---|---|"]
    for name, values in results["scores"].items():
        pct = [f"{np.percentile(values, q):.3f}" for q in (1, 5, 25, 50, 75, 95, 99)]
        lines.append(f"| {name} | {len(values)} | " + " | ".join(pct) + " |")
    lines += ["", "| floor | SciFact answered | router_questions refused | doc2dial (over SciFact) refused | "
              "doc2dial (own corpus) answered |", "|---|---|---|---|---|"]
    for row in results["floors"]:
        lines.append(f"| {row['floor']:.2f} | {row['answered']:.3f} | {row['refused_general']:.3f} | "
                     f"{row['refused_doc2dial']:.3f} | {row['answered_doc2dial']:.3f} |")
    lines += ["", f"Default: {results['default']}, chosen on these figures: the highest floor that still answers "
              "99 % of the SciFact questions, refusing most off-topic ones. Measured for English with MiniLM; Chinese "
              "questions and encoders without token vectors skip the floor.", ""]
    return "\n".join(lines)


def main() -> None:
    started = time.perf_counter()
    log = progress_log(started)
    values = asyncio.run(scores(log))
    yes, general, d2d, d2d_own = values.values()
    floors = [{"floor": f, "answered": float(np.mean([x >= f for x in yes])),
               "refused_general": float(np.mean([x < f for x in general])),
               "refused_doc2dial": float(np.mean([x < f for x in d2d])),
               "answered_doc2dial": float(np.mean([x >= f for x in d2d_own]))} for f in FLOORS]
    results = {"meta": machine_info(["rag-appliance", "onnxruntime", "usearch", "bm25s"]), "scores": values,
               "floors": floors, "default": GenerateSettings().min_relevance}
    write_results(OUT, results, markdown, started, lambda r: [], log)


if __name__ == "__main__":
    main()
