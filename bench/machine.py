"""Machine facts every benchmark records beside its figures: what ran, where, and how busy the box was."""
from __future__ import annotations

import datetime
import os
import platform
import shlex
import subprocess
import sys
import time
from importlib import metadata
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent


def machine_info(packages: list[str]) -> dict:
    cpu = next((line.split(":", 1)[1].strip() for line in open("/proc/cpuinfo") if line.startswith("model name")),
               platform.processor())
    flags = next((line.split(":", 1)[1].split() for line in open("/proc/cpuinfo") if line.startswith("flags")), [])
    mem = next((int(line.split()[1]) * 1024 for line in open("/proc/meminfo") if line.startswith("MemTotal")), 0)
    python = os.path.relpath(sys.executable, REPO) if sys.executable.startswith(str(REPO)) else sys.executable
    versions = {}
    for name in packages:
        try:
            versions[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            versions[name] = None
    return {
        "command": shlex.join([python, os.path.relpath(sys.argv[0], REPO), *sys.argv[1:]]),
        "date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
        "cpu_model": cpu, "cpu_simd": [f for f in ("avx2", "avx_vnni", "avx512f", "avx512_vnni", "avx512_bf16", "amx_int8",
                                              "amx_bf16") if f in flags],
        "cores": os.cpu_count(), "cores_usable": len(os.sched_getaffinity(0)),
        "memory_gib": round(mem / 2**30, 1), "python": platform.python_version(), "packages": versions,
        "commit": _git("rev-parse", "--short", "HEAD"), "uncommitted_changes": bool(_git("status", "--porcelain")),
        "load_average_at_start": [round(x, 2) for x in os.getloadavg()],
    }


def retrieval_settings(data_dir: Path):
    """The product's defaults on the checkout's models with generation off, in a bench's own data folder."""
    from appliance.config import load_settings

    return load_settings(env={"APPLIANCE_DATA_DIR": str(data_dir), "APPLIANCE_MODELS_DIR": str(REPO / "models"),
                              "APPLIANCE_DEMO_CORPUS": "false", "APPLIANCE_GENERATE_ENABLED": "false",
                              "APPLIANCE_LOG_LEVEL": "warning"})


def _git(*cmd: str) -> str | None:
    done = subprocess.run(["git", *cmd], cwd=REPO, capture_output=True, text=True)
    return done.stdout.strip() if done.returncode == 0 else None


def write_results(out: Path, results: dict, markdown, started: float, judge, log) -> None:
    """Close a run: wall time, load at the end, verdicts (`judge(results)`), then out.json and out.md."""
    import json

    results["meta"]["wall_s"] = round(time.perf_counter() - started, 1)
    results["meta"]["load_average_at_end"] = [round(x, 2) for x in os.getloadavg()]
    results["targets"] = judge(results)
    out.parent.mkdir(parents=True, exist_ok=True)
    # the name's dots are its own (generation_qwen2.5-1.5b); only a .md or .json given with it is dropped
    stem = out.name.removesuffix(".md").removesuffix(".json")
    (out.parent / f"{stem}.json").write_text(json.dumps(results, indent=1, ensure_ascii=False))
    (out.parent / f"{stem}.md").write_text(markdown(results))
    log(f"wrote {out.parent / stem}.md and .json")


def progress_log(started: float):
    """A `log(message)` that prints each line with the seconds since `started` (time.perf_counter())."""
    def log(message: str) -> None:
        print(f"[{time.perf_counter() - started:6.0f}s] {message}", flush=True)
    return log


def report_header(title: str, r: dict, recipe: str, quick_what: str) -> list[str]:
    """The lines every report starts with: the title, a quick-run warning, command, date and commit, machine, load
    per step and packages (`r["meta"]` from `machine_info`, `r["steps"]` {name: {wall_s, load_before, load_after}})."""
    m = r["meta"]
    dirty = " plus uncommitted changes" if m.get("uncommitted_changes") else ""
    lines = [f"# {title}", ""]
    if m["quick"]:
        lines += [f"**QUICK RUN on {quick_what}: for debugging only, not a result.**", ""]
    return lines + [
        f"- Command: `{m['command']}` (`just {recipe}` runs it without flags)",
        f"- Date: {m['date']}; commit {m['commit'] or 'none yet'}{dirty}; wall time {m['wall_s']} s",
        f"- Machine: {m['cpu_model']}, SIMD flags: {', '.join(m['cpu_simd']) or 'none of avx2/avx512f/amx'}; "
        f"{m['cores']} cores ({m['cores_usable']} usable), {m['memory_gib']} GiB RAM, Python {m['python']}",
        f"- Load average (1, 5, 15 min) at start: {m['load_average_at_start']}, at end: {m['load_average_at_end']} "
        "(anything else running on the box shows here); per step, wall s (1-min load before -> after): "
        + (", ".join(f"{k} {v['wall_s']} s ({v['load_before']} -> {v['load_after']})" for k, v in r["steps"].items())
           or "none run"),
        "- Packages: " + ", ".join(f"{k} {v}" for k, v in m["packages"].items() if v),
    ]


def step_runner(results: dict):
    """`await step(name, work)`: results[name] = await work, and in results["steps"][name] its wall seconds and the
    1-minute load before and after (what else ran on the box shows there)."""
    steps = results.setdefault("steps", {})

    async def step(name: str, work) -> None:
        before, started = round(os.getloadavg()[0], 2), time.perf_counter()
        results[name] = await work
        steps[name] = {"wall_s": round(time.perf_counter() - started, 1), "load_before": before,
                       "load_after": round(os.getloadavg()[0], 2)}
    return step
