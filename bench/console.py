"""Console benchmark: what the page costs, ours against the peer a user would otherwise put in front of the box (a
Gradio page as PrivateGPT ships, with a chat box, an upload and a stats panel on a 3 s timer), in the same
Debian chromium, on loopback, in the same run.

1. first load, cold cache, N runs each: bytes and requests, requests to other origins, time until usable (ours:
   the Overview drawn with the box's figures; the peer: its chat box on screen);
2. pages left open: requests/s they add and the server's CPU (ms per s, children included) with 0, 1 and 10
   pages open, over the same window;
3. the overview request on the server alone: p50/p99 of GET /v1/admin/overview over loopback.

Ours runs `python -m appliance serve` (default models, demo corpus, generation off: the page's cost does not
depend on the engines); the peer runs in its own virtual environment (`--peer-python`, made by `just
bench-console`). Writes bench/results/console.md and .json.
"""
from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parent))
from console_kit import measure  # noqa: E402
from machine import REPO, machine_info, progress_log, report_header, write_results  # noqa: E402
from server_process import free_port, stop, wait_ready  # noqa: E402

OURS_READY = "[data-status=ready]"
PEER_READY = "textarea"
OUT = REPO / "bench" / "results" / "console"


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--peer-python", default=str(REPO / ".venv-gradio" / "bin" / "python"))
    p.add_argument("--runs", type=int, default=10, help="cold first loads per page")
    p.add_argument("--seconds", type=float, default=30, help="window for the open-pages cost")
    p.add_argument("--quick", action="store_true", help="3 loads, 5 s windows: for debugging only")
    return p.parse_args(argv)


def run_async(coro):
    """asyncio.run on a thread of its own: Playwright's sync API keeps an event loop running on this one."""
    with ThreadPoolExecutor(1) as pool:
        return pool.submit(asyncio.run, coro).result()


def start_ours(folder: Path) -> tuple[subprocess.Popen, str]:
    port = free_port()
    env = {**os.environ, "APPLIANCE_DATA_DIR": str(folder / "state"), "APPLIANCE_MODELS_DIR": str(REPO / "models"),
           "APPLIANCE_SERVER_PORT": str(port), "APPLIANCE_GENERATE_ENABLED": "false",
           "APPLIANCE_DEMO_CORPUS": "true", "APPLIANCE_LOG_LEVEL": "warning"}
    log = folder / "ours.log"
    proc = subprocess.Popen([sys.executable, "-m", "appliance", "serve"], cwd=REPO, env=env,
                            stdout=subprocess.DEVNULL, stderr=log.open("wb"))
    url = f"http://127.0.0.1:{port}"
    run_async(wait_ready(proc, url, log, 600))
    return proc, url


def start_peer(python: str, folder: Path) -> tuple[subprocess.Popen, str]:
    port = free_port()
    log = folder / "peer.log"
    proc = subprocess.Popen([python, str(REPO / "bench" / "console_kit" / "peer_app.py"), str(port)],
                            stdout=log.open("wb"), stderr=subprocess.STDOUT,
                            env={**os.environ, "GRADIO_ANALYTICS_ENABLED": "False"})
    url = f"http://127.0.0.1:{port}"
    deadline = time.time() + 300
    while time.time() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"the peer exited: {log.read_text(errors='replace')[-2000:]}")
        try:
            if httpx.get(url + "/", timeout=2).status_code == 200:
                return proc, url
        except httpx.HTTPError:
            pass
        time.sleep(0.5)
    raise TimeoutError("the peer did not start")


def overview_latency(url: str, n: int) -> dict:
    times = []
    with httpx.Client(base_url=url, timeout=30) as c:
        for _ in range(n):
            started = time.perf_counter()
            c.get("/v1/admin/overview").raise_for_status()
            times.append((time.perf_counter() - started) * 1000)
        size = len(c.get("/v1/admin/overview").content)
    times.sort()
    return {"n": n, "p50_ms": round(statistics.median(times), 2), "p99_ms": round(times[int(0.99 * (n - 1))], 2),
            "body_kb": round(size / 1024, 1)}


def measure_page(browser, url: str, ready: str, pid: int, runs: int, seconds: float, log) -> dict:
    out = {"first_load": measure.first_loads(browser, url, ready, runs)}
    log(f"  first loads: {out['first_load']['ms_to_usable_p50']} ms p50, {out['first_load']['kb']} KB")
    out["open_pages"] = [measure.idle_cost(pid, seconds)]
    for pages in (1, 10):
        out["open_pages"].append(measure.open_pages_cost(browser, url, ready, pid, pages, seconds))
        log(f"  {pages} open: {out['open_pages'][-1]}")
    return out


def main(argv=None) -> int:
    args = parse_args(argv)
    if args.quick:
        args.runs, args.seconds = 3, 5
    started = time.perf_counter()
    log = progress_log(started)
    results: dict = {"meta": machine_info(["playwright", "starlette", "uvicorn"]) | {"quick": args.quick},
                     "steps": {}}
    results["meta"]["peer"] = subprocess.run([args.peer_python, "-c", "import gradio; print(gradio.__version__)"],
                                             capture_output=True, text=True, check=True).stdout.strip()
    results["meta"]["chromium"] = subprocess.run(["chromium", "--version"], capture_output=True,
                                                 text=True).stdout.strip()
    sys.path.insert(0, str(REPO / "tests"))
    from browser import launched

    with tempfile.TemporaryDirectory() as tmp, launched() as browser:
        folder = Path(tmp)
        for name, start, ready in (("ours", start_ours, OURS_READY),
                                   ("peer", lambda f: start_peer(args.peer_python, f), PEER_READY)):
            step_started, load = time.perf_counter(), os.getloadavg()[0]
            proc, url = start(folder)
            log(f"{name} up at {url}")
            try:
                results[name] = measure_page(browser, url, ready, proc.pid, args.runs, args.seconds, log)
                if name == "ours":
                    results[name]["overview_request"] = overview_latency(url, 50 if args.quick else 300)
            finally:
                run_async(stop(proc))
            results["steps"][name] = {"wall_s": round(time.perf_counter() - step_started, 1),
                                      "load_before": round(load, 2), "load_after": round(os.getloadavg()[0], 2)}
    write_results(OUT, results, markdown, started, judge, log)
    return 0


def judge(r: dict) -> list[str]:
    ours, peer = r["ours"]["first_load"], r["peer"]["first_load"]
    return [f"first load {ours['kb']} KB vs the peer's {peer['kb']} KB ({_ratio(peer['kb'], ours['kb'])} smaller)",
            f"usable after {ours['ms_to_usable_p50']} ms vs {peer['ms_to_usable_p50']} ms p50",
            f"requests to other origins: ours {len(ours['foreign'])}, the peer {len(peer['foreign'])}"]


def _ratio(a: float, b: float) -> str:
    return f"{a / b:.1f}x" if b else "n/a"


def markdown(r: dict) -> str:
    lines = report_header("Console: the page's own cost, against a Gradio page", r, "bench-console",
                          "3 loads, 5 s windows")
    m = r["meta"]
    lines += [f"- Browser: {m['chromium']} (headless, Playwright); peer: Gradio {m['peer']}", "",
              "## First load (cold cache)", "",
              "| page | KB transferred | KB decoded | requests | to other origins | usable after, p50 (max) | "
              "page's own clock p50 |", "|---|---|---|---|---|---|---|"]
    for name, label in (("ours", "ours (Overview with data)"), ("peer", "Gradio (chat box shown)")):
        f = r[name]["first_load"]
        lines.append(f"| {label} | {f['kb']} | {f['body_kb']} | {f['requests']} | {len(f['foreign'])} | "
                     f"{f['ms_to_usable_p50']} ms ({f['ms_to_usable_max']}) | {f['page_ms_p50']} ms |")
    peer_foreign = r["peer"]["first_load"]["foreign"]
    if peer_foreign:
        lines += ["", "The peer's page asked other origins for: " + ", ".join(f"`{u}`" for u in peer_foreign[:6])
                  + " (on an air-gapped box each fails)."]
    ours, peer = r["ours"]["first_load"], r["peer"]["first_load"]
    lines += ["", f"Ratios: the peer transfers {_ratio(peer['kb'], ours['kb'])} our bytes and is usable after "
              f"{_ratio(peer['ms_to_usable_p50'], ours['ms_to_usable_p50'])} our time.", "",
              "## Pages left open: what they cost the server", "",
              "| page | pages open | requests/s added | server CPU, ms per s |", "|---|---|---|---|"]
    for name in ("ours", "peer"):
        for o in r[name]["open_pages"]:
            lines.append(f"| {name} | {o['pages']} | {o['requests_per_s']} | {o['server_cpu_ms_per_s']} |")
    o = r["ours"]["overview_request"]
    lines += ["", f"GET /v1/admin/overview on its own: p50 {o['p50_ms']} ms, p99 {o['p99_ms']} ms over {o['n']} "
              f"sequential requests; {o['body_kb']} KB per answer.", "",
              "Ours polls the overview every 3 s while the Overview is shown and the tab is visible; the peer's timer "
              "ticks every 3 s over its queue.", "", "## Verdicts", "", *[f"- {t}" for t in r["targets"]]]
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    sys.exit(main())
