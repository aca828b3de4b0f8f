"""Several boxes behind HAProxy against one box, on this machine: search throughput and P99 for 1, 2 and 3
boxes, failover time after kill -9, and catch-up time for 1,000 documents.

Every box is its own `appliance serve` process pinned with taskset to its share of the cores, behind Debian's
haproxy with the configuration `appliance cluster config` prints (tests/cluster_site.py starts them, as the tests
do). The peer is what a user would otherwise run: one box of the same total size (all the cores). The engines are
off: /v1/search is the request measured (new queries, so no cache answers them); /v1/ask is not measured here
(it needs an engine per box, and this 2-core machine runs at most one engine's worth of generation).
"""
from __future__ import annotations

import argparse
import asyncio
import os
import random
import signal
import statistics
import sys
import tempfile
import time
from pathlib import Path

import httpx

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "tests"))  # the site harness the tests use
from bench.machine import machine_info, progress_log, report_header, write_results  # noqa: E402
from cluster_site import ClusterSite  # noqa: E402

from appliance.evaluate import load_beir  # noqa: E402

OUT = REPO / "bench" / "results" / "cluster"
SCIFACT = REPO.parent / "shared" / "data" / "beir_scifact"


def layouts(cores: int) -> list[tuple[str, list[str], dict[str, str]]]:
    """(label, box names, cores per box): one box per core up to the cores there are."""
    every = f"0-{cores - 1}"
    out = [("1 box, all cores (the peer: one box of the same total size)", ["a"], {"a": every})]
    for n in (1, 2, 3):
        names = ["a", "b", "c"][:n]
        share = {name: str(i % cores) for i, name in enumerate(names)}
        label = f"{n} box{'es' if n > 1 else ''}, 1 core each" + (" (oversubscribed)" if n > cores else "")
        out.append((label, names, share))
    return out


async def load(url: str, tenants: list[str], queries: list[str], clients: int, seconds: float) -> dict:
    latencies: list[float] = []
    errors = 0
    stop_at = time.perf_counter() + seconds

    async def client_loop(rng: random.Random) -> None:
        nonlocal errors
        async with httpx.AsyncClient(base_url=url, timeout=30) as client:
            while time.perf_counter() < stop_at:
                tenant, query = rng.choice(tenants), rng.choice(queries)
                t = time.perf_counter()
                reply = await client.post("/v1/search", json={"tenant": tenant, "query": query, "k": 10},
                                          headers={"X-Tenant": tenant})
                if reply.status_code == 200:
                    latencies.append((time.perf_counter() - t) * 1000)
                else:
                    errors += 1

    started = time.perf_counter()
    await asyncio.gather(*(client_loop(random.Random(i)) for i in range(clients)))
    wall = time.perf_counter() - started
    latencies.sort()
    return {"requests": len(latencies), "errors": errors, "per_s": round(len(latencies) / wall, 1),
            "p50_ms": round(statistics.median(latencies), 1),
            "p99_ms": round(latencies[int(len(latencies) * 0.99) - 1], 1)}


def ingest(site: ClusterSite, tenants: list[str], docs: list[dict]) -> float:
    started = time.perf_counter()
    for i, tenant in enumerate(tenants):
        chosen = docs[i * 40:(i + 1) * 40]
        with site.client(tenant) as client:
            reply = client.post("/v1/documents", json={"tenant": tenant, "partition": "abstracts", "documents": chosen})
            reply.raise_for_status()
    return time.perf_counter() - started


def failover(site: ClusterSite, tenant: str) -> float:
    """Seconds from kill -9 of the tenant's home to its first search answered by the backup."""
    home = site.boxes[site.site.placement(tenant).home.name]
    home.kill(signal.SIGKILL)
    killed = time.perf_counter()
    with site.client(tenant) as client:
        while True:
            try:
                if client.post("/v1/search", json={"tenant": tenant, "query": "cells"}).status_code == 200:
                    return time.perf_counter() - killed
            except httpx.HTTPError:
                pass
            time.sleep(0.05)


def catch_up(site: ClusterSite, docs: list[dict], log) -> dict:
    """Box b down, 1,000 documents written to a tenant it backs up, b started again: boot to ready, and how long
    its catch-up took (from its log), against the same box's boot with nothing to catch up."""
    tenant = next(t for t in (f"catch-{i}" for i in range(1000))
                  if site.site.placement(t).home.name == "a" and site.site.placement(t).backup.name == "b")
    b = site.boxes["b"]
    b.kill(signal.SIGINT)
    b.wait_exit(60)
    b.start()
    t = time.perf_counter()
    b.wait_ready()
    plain_boot = time.perf_counter() - t
    b.kill(signal.SIGKILL)
    b.wait_exit(60)
    with site.client(tenant) as client:
        for i in range(0, 1000, 100):
            batch = [{**d, "id": f"{d['id']}-{i}"} for d in docs[i:i + 100]]
            client.post("/v1/documents", json={"tenant": tenant, "partition": "p", "documents": batch,
                                               "wait": False}).raise_for_status()
    log("1,000 documents written while b was down; starting b")
    b.start()
    t = time.perf_counter()
    b.wait_ready()
    boot = time.perf_counter() - t
    caught = [line for line in b.log_tail(200_000).splitlines() if "caught up in" in line][-1]
    listed = httpx.get(b.url + "/v1/documents", params={"tenant": tenant, "partition": "p", "limit": 1000}).json()
    return {"boot_to_ready_s": round(boot, 1), "boot_without_catch_up_s": round(plain_boot, 1),
            "catch_up_log": caught.split("INFO ", 1)[-1], "documents_on_b": len(listed["documents"])}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seconds", type=float, default=20)
    parser.add_argument("--clients", type=int, default=32)
    parser.add_argument("--tenants", type=int, default=12)
    args = parser.parse_args()
    started = time.perf_counter()
    log = progress_log(started)
    data = load_beir(SCIFACT)
    docs = [{"id": str(d["_id"]), "title": d.get("title") or "", "text": d["text"]} for d in data.corpus[:1000]]
    queries = list(data.queries.values())
    tenants = [f"tenant-{i}" for i in range(args.tenants)]
    cores = len(os.sched_getaffinity(0))
    results = {"meta": machine_info(["usearch", "bm25s", "onnxruntime", "uvicorn"]) | {"quick": args.seconds < 10},
               "layouts": [], "args": vars(args), "steps": {}}
    for label, names, cpus in layouts(cores):
        step_started, load_before = time.perf_counter(), round(os.getloadavg()[0], 2)
        with tempfile.TemporaryDirectory(prefix="bench-site-") as folder:
            site = ClusterSite(Path(folder), REPO / "models", names, cpus)
            try:
                site.start()
                took = ingest(site, tenants, docs)
                log(f"{label}: {args.tenants * 40} documents ingested in {took:.1f} s")
                figures = asyncio.run(load(site.url, tenants, queries, args.clients, args.seconds))
                log(f"{label}: {figures}")
                entry = {"layout": label, "boxes": len(names), "cores": cpus, "ingest_s": round(took, 1), **figures}
                if len(names) == 3:
                    entry["failover_s"] = round(failover(site, tenants[0]), 2)
                    log(f"failover {entry['failover_s']} s")
                    site.boxes[site.site.placement(tenants[0]).home.name].start()
                    for box in site.boxes.values():
                        box.wait_ready()
                    results["catch_up"] = catch_up(site, docs, log)
                    log(f"catch-up {results['catch_up']}")
                results["layouts"].append(entry)
            finally:
                site.stop()
        results["steps"][label.split(" (")[0]] = {"wall_s": round(time.perf_counter() - step_started, 1),
                                                  "load_before": load_before,
                                                  "load_after": round(os.getloadavg()[0], 2)}
    write_results(OUT, results, markdown, started, lambda r: {}, log)


def markdown(r: dict) -> str:
    lines = report_header("Several boxes behind HAProxy vs one box", r, "bench-cluster", "a few seconds of load")
    peer = r["layouts"][0]
    lines += ["", f"/v1/search, new SciFact queries, {r['args']['clients']} clients for {r['args']['seconds']:g} s "
              f"through HAProxy, {r['args']['tenants']} tenants of 40 abstracts each (every tenant on two boxes "
              "where there are two or more).", "",
              "| layout | searches/s | vs one box of all cores | p50 ms | p99 ms | errors | ingest s |",
              "|---|---|---|---|---|---|---|"]
    for e in r["layouts"]:
        lines.append(f"| {e['layout']} | {e['per_s']} | {e['per_s'] / peer['per_s']:.2f}x | {e['p50_ms']} | "
                     f"{e['p99_ms']} | {e['errors']} | {e['ingest_s']} |")
    three = next((e for e in r["layouts"] if "failover_s" in e), None)
    if three:
        lines += ["", f"Failover: a tenant's first search answered by its backup {three['failover_s']} s after "
                  "kill -9 of its home (health checks every 1 s, down after 2)."]
    if "catch_up" in r:
        c = r["catch_up"]
        lines += ["", f"Catch-up: box b down while 1,000 documents were written to a tenant it backs up, then "
                  f"started: ready in {c['boot_to_ready_s']} s (the same box with nothing to catch up: "
                  f"{c['boot_without_catch_up_s']} s), {c['documents_on_b']} documents on b; its log: "
                  f"`{c['catch_up_log']}`."]
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    main()
