"""Serving benchmark: the semantic cache against GPTCache (right/wrong hits on QQP and AFQMC pairs, thresholds
calibrated on a dev split, lookup latency with 100k entries), then end-to-end load on loopback: the full appliance
against a naive configuration of the same server.

    .venv/bin/python bench/serving.py                # both parts (`just bench-serving`)
    .venv/bin/python bench/serving.py --part cache   # part 1 only (~15-20 min on 2 cores)
    .venv/bin/python bench/serving.py --part load    # part 2 only (~25 min: two servers, stepped open-loop load)

Writes bench/results/serving.md and .json; running one part keeps the other part's figures from the previous
results file (the report names the run they came from). Vectors are cached in bench/.cache. Nothing but
127.0.0.1 is contacted.
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))  # serving_kit and machine beside this file

import onnxruntime  # noqa: E402,F401 - before usearch and faiss (see appliance.encode)

import machine  # noqa: E402
from serving_kit import report, targets  # noqa: E402
from serving_kit.vectors import REPO  # noqa: E402


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--part", choices=["cache", "load", "all"], default="all")
    p.add_argument("--models", type=Path, default=REPO / "models", help="models folder (built: models/build/*)")
    p.add_argument("--skip-latency", action="store_true", help="part 1 without the 100k-entry latency check")
    p.add_argument("--out", type=Path, default=REPO / "bench" / "results" / "serving", help="output path, no suffix")
    from serving_kit.load import add_args

    add_args(p)
    return p.parse_args(argv)


def run_cache(args, log) -> dict:
    from importlib import metadata

    from serving_kit import cache_eval, latency
    from serving_kit.vectors import DATASETS, load_dataset

    out: dict = {"meta": machine.machine_info(report.PACKAGES), "gptcache_version": metadata.version("gptcache"),
                 "datasets": {}}
    loaded = {}
    for name in DATASETS:
        pairs, vectors, encoder = load_dataset(name, args.models, log)
        loaded[name] = (pairs, vectors)
        out["datasets"][name] = cache_eval.run(name, pairs, vectors, encoder, log)
    out["derivation_checks_ok"] = all(d["gptcache_derivation_check"] for d in out["datasets"].values())
    if not args.skip_latency:
        chosen = out["datasets"]["qqp_en"]["chosen"]
        out["latency"] = latency.run(*loaded["qqp_en"], chosen["threshold"], chosen["late_threshold"], log)
    return out


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    started = time.perf_counter()
    log = machine.progress_log(started)

    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    previous = {}
    if args.part != "all" and args.out.with_suffix(".json").exists():
        previous = json.loads(args.out.with_suffix(".json").read_text())
    results: dict = {"meta": machine.machine_info(report.PACKAGES)}
    results["meta"]["part"] = args.part
    if args.part in ("cache", "all"):
        results["cache"] = run_cache(args, log)
    elif "cache" in previous:
        results["cache"] = previous["cache"]
    if args.part in ("load", "all"):
        from serving_kit import load

        results["load"] = load.run(args, log)
    elif "load" in previous:
        results["load"] = previous["load"]
    machine.write_results(args.out, results, report.markdown, started, targets.targets, log)
    return 0


if __name__ == "__main__":
    sys.exit(main())
