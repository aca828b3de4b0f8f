"""What a page costs, measured in Debian's chromium (Playwright): first load (bytes, requests, requests to other
origins, time until usable) from a cold cache, and what pages left open cost the server (requests/s, CPU)."""
from __future__ import annotations

import statistics
import time
from dataclasses import asdict, dataclass

import psutil

# Resource Timing of the navigation and of everything it fetched (transferSize: bytes on the wire, headers too)
_ENTRIES = """() => [...performance.getEntriesByType('navigation'), ...performance.getEntriesByType('resource')]
    .map(e => ({name: e.name, transfer: e.transferSize, body: e.decodedBodySize}))"""


@dataclass(frozen=True, slots=True)
class Load:
    ms_to_usable: float  # from goto() to the ready selector (wall clock, this process)
    page_ms: float  # the page's own performance.now() at that moment (from navigation start)
    bytes: int  # transferred, as Resource Timing reports
    body_bytes: int  # decoded bodies
    requests: int
    foreign: list[str]  # requests (attempted) to other origins


def first_loads(browser, url: str, ready: str, runs: int) -> dict:
    loads = [asdict(_load(browser, url, ready)) for _ in range(runs)]
    times = sorted(x["ms_to_usable"] for x in loads)
    return {"runs": runs, "ms_to_usable_p50": round(statistics.median(times), 1),
            "ms_to_usable_max": round(times[-1], 1),
            "page_ms_p50": round(statistics.median(x["page_ms"] for x in loads), 1),
            "kb": round(loads[-1]["bytes"] / 1024, 1), "body_kb": round(loads[-1]["body_bytes"] / 1024, 1),
            "requests": loads[-1]["requests"], "foreign": sorted({f for x in loads for f in x["foreign"]}),
            "all": loads}


def _load(browser, url: str, ready: str) -> Load:
    context = browser.new_context(viewport={"width": 1280, "height": 900})  # a cold cache each time
    page = context.new_page()
    origin = url.rstrip("/")
    foreign: list[str] = []
    page.on("request", lambda r: foreign.append(r.url) if not r.url.startswith((origin, "data:", "blob:")) else None)
    try:
        started = time.perf_counter()
        page.goto(url)
        page.wait_for_selector(ready, timeout=60_000)
        wall = (time.perf_counter() - started) * 1000
        page_ms = page.evaluate("performance.now()")
        page.wait_for_timeout(500)  # let late assets (fonts, icons) land before counting
        entries = page.evaluate(_ENTRIES)
    finally:
        context.close()
    return Load(round(wall, 1), round(page_ms, 1), sum(e["transfer"] for e in entries),
                sum(e["body"] for e in entries), len(entries), foreign)


def open_pages_cost(browser, url: str, ready: str, pid: int, pages: int, seconds: float) -> dict:
    """`pages` pages left open for `seconds`: the requests they send, and the server's CPU meanwhile."""
    contexts, counts = [], []
    for _ in range(pages):
        context = browser.new_context()
        page = context.new_page()
        count = [0]
        page.on("request", lambda r, count=count: count.__setitem__(0, count[0] + 1))
        page.goto(url)
        page.wait_for_selector(ready, timeout=60_000)
        contexts.append(context)
        counts.append(count)
    try:
        before = [c[0] for c in counts]
        cpu0, t0 = _cpu(pid), time.perf_counter()
        contexts[0].pages[0].wait_for_timeout(seconds * 1000)
        cpu1, t1 = _cpu(pid), time.perf_counter()
        sent = sum(c[0] for c in counts) - sum(before)
    finally:
        for context in contexts:
            context.close()
    return {"pages": pages, "seconds": round(t1 - t0, 1), "requests_per_s": round(sent / (t1 - t0), 3),
            "server_cpu_ms_per_s": round((cpu1 - cpu0) * 1000 / (t1 - t0), 2)}


def idle_cost(pid: int, seconds: float) -> dict:
    cpu0, t0 = _cpu(pid), time.perf_counter()
    time.sleep(seconds)
    cpu1, t1 = _cpu(pid), time.perf_counter()
    return {"pages": 0, "seconds": round(t1 - t0, 1), "requests_per_s": 0.0,
            "server_cpu_ms_per_s": round((cpu1 - cpu0) * 1000 / (t1 - t0), 2)}


def _cpu(pid: int) -> float:
    """CPU seconds of the server and its children (parser workers, engine processes)."""
    proc = psutil.Process(pid)
    total = sum(proc.cpu_times()[:2])
    for child in proc.children(recursive=True):
        try:
            total += sum(child.cpu_times()[:2])
        except psutil.NoSuchProcess:
            pass
    return total
