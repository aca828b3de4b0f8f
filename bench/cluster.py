"""Several boxes behind HAProxy against one box, on this machine: /v1/search and /v1/ask (exact-cache hits and new
questions) throughput and P99 for 1, 2 and 3 boxes, failover time after kill -9, and catch-up time for 1,000
documents.

Every box is its own `appliance serve` process pinned with taskset to its share of the cores, behind Debian's
haproxy with the configuration `appliance cluster config` prints (tests/cluster_site.py starts them, as the tests
do), with one engine (the default small model, SmolLM2, its worker bound to the box's cores). The peer is what a
user would otherwise run: one box of the same total size (all the cores). Searches are new queries (the even
SciFact queries; no cache answers them); asks use the odd ones: a few asked once per tenant to fill the exact
cache, then asked again (hits), then questions never asked before (each goes through retrieval and the engine).
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


ASK_TOKENS = 32  # answer cap: a CPU engine's decode, not the site, would otherwise be what is measured


async def load(url: str, next_request, clients: int, seconds: float) -> dict:
    """`clients` loops for `seconds`, each sending `next_request(rng)` -> (tenant, path, body) through the
    balancer; latencies of the 200s, the errors, and how the asks were answered (cache layer, degraded)."""
    latencies: list[float] = []
    generated_ms: list[float] = []  # asks the engine answered (neither a cache hit nor retrieval only)
    errors, answered = 0, {"exact": 0, "semantic": 0, "none": 0, "degraded": 0}
    stop_at = time.perf_counter() + seconds

    async def client_loop(rng: random.Random) -> None:
        nonlocal errors
        async with httpx.AsyncClient(base_url=url, timeout=120) as client:
            while time.perf_counter() < stop_at:
                tenant, path, body = next_request(rng)
                t = time.perf_counter()
                reply = await client.post(path, json=body, headers={"X-Tenant": tenant})
                if reply.status_code != 200:
                    errors += 1
                    continue
                latencies.append((time.perf_counter() - t) * 1000)
                if path == "/v1/ask":
                    answer = reply.json()
                    answered[answer.get("cache") or "none"] += 1
                    answered["degraded"] += bool(answer.get("degraded"))
                    if answer.get("cache") in (None, "none") and not answer.get("degraded"):
                        generated_ms.append(latencies[-1])

    started = time.perf_counter()
    await asyncio.gather(*(client_loop(random.Random(i)) for i in range(clients)))
    wall = time.perf_counter() - started
    figures = {"requests": len(latencies), "errors": errors, "per_s": round(len(latencies) / wall, 2),
               **percentiles(latencies)}
    if not sum(answered.values()):
        return figures
    return figures | {"answered": answered, "generated_per_s": round(len(generated_ms) / wall, 2),
                      "generated": percentiles(generated_ms)}


def percentiles(ms: list[float]) -> dict:
    ms = sorted(ms)
    if not ms:
        return {"p50_ms": None, "p99_ms": None}
    return {"p50_ms": round(statistics.median(ms), 1), "p99_ms": round(ms[max(0, int(len(ms) * 0.99) - 1)], 1)}


def searches(tenants: list[str], queries: list[str]):
    return lambda rng: (tenant := rng.choice(tenants), "/v1/search",
                        {"tenant": tenant, "query": rng.choice(queries), "k": 10})


def asks(tenants: list[str], questions: list[str]):
    """Asks of `questions` by random tenants (repeats expected)."""
    def pick(rng: random.Random):
        tenant = rng.choice(tenants)
        return tenant, "/v1/ask", {"tenant": tenant, "question": rng.choice(questions), "max_tokens": ASK_TOKENS}
    return pick


def new_asks(tenants: list[str], questions: list[str]):
    """Each (tenant, question) pair once, in a shuffled order: caches are per tenant, so each is new to its box
    (12 tenants x 147 questions: more than a run asks even when most answers degrade in ~50 ms)."""
    pairs = [(t, q) for t in tenants for q in questions]
    random.Random(7).shuffle(pairs)
    remaining = iter(pairs)

    def pick(rng: random.Random):
        tenant, question = next(remaining)
        return tenant, "/v1/ask", {"tenant": tenant, "question": question, "max_tokens": ASK_TOKENS}
    return pick


async def fill(url: str, tenants: list[str], questions: list[str]) -> int:
    """Ask each tenant each question (2 at a time, so the engines are not past their wait budget) until an answer
    is generated, which the exact cache stores (a degraded one it does not), 5 tries at most; how many were."""
    gate, stored = asyncio.Semaphore(2), 0

    async def one(client: httpx.AsyncClient, tenant: str, question: str) -> None:
        nonlocal stored
        async with gate:
            for _ in range(5):
                reply = await client.post("/v1/ask", headers={"X-Tenant": tenant}, json={
                    "tenant": tenant, "question": question, "max_tokens": ASK_TOKENS})
                if reply.status_code == 200 and not reply.json().get("degraded"):
                    stored += 1
                    return
                await asyncio.sleep(1)

    async with httpx.AsyncClient(base_url=url, timeout=300) as client:
        await asyncio.gather(*(one(client, t, q) for t in tenants for q in questions))
    return stored


async def measure(url: str, tenants: list[str], queries: list[str], args, log, label: str) -> dict:
    even, odd = queries[0::2], queries[1::2]
    hit_questions, new_questions = odd[:args.hit_questions], odd[args.hit_questions:]
    out = {"search": await load(url, searches(tenants, even), args.clients, args.seconds)}
    log(f"{label}: search {out['search']}")
    out["fill"] = {"asked": len(tenants) * len(hit_questions), "stored": await fill(url, tenants, hit_questions)}
    out["ask_hits"] = await load(url, asks(tenants, hit_questions), args.clients, args.seconds)
    log(f"{label}: ask, exact-cache hits {out['ask_hits']}")
    out["ask_new"] = await load(url, new_asks(tenants, new_questions), args.ask_clients, args.ask_seconds)
    log(f"{label}: ask, new questions {out['ask_new']}")
    return out


# One engine a box, the product's small model on the box's cores (cluster_site binds it); every question goes to
# it (no relevance floor: each tenant holds 40 random abstracts, which most SciFact questions are not about).
ENGINE = {"generate_enabled": "true", "large_enabled": "false", "small_kv_cache_gib": "0.25",
          "generate_min_relevance": "0"}


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
    parser.add_argument("--hit-questions", type=int, default=3, help="questions per tenant in the exact cache")
    parser.add_argument("--ask-clients", type=int, default=8, help="clients asking new questions")
    parser.add_argument("--ask-seconds", type=float, default=30)
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
            site = ClusterSite(Path(folder), REPO / "models", names, cpus, **ENGINE)
            try:
                site.start()
                took = ingest(site, tenants, docs)
                log(f"{label}: {args.tenants * 40} documents ingested in {took:.1f} s")
                figures = asyncio.run(measure(site.url, tenants, queries, args, log, label))
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
    a = r["args"]
    lines += ["", f"Through HAProxy, {a['tenants']} tenants of 40 SciFact abstracts each (every tenant on two boxes "
              "where there are two or more); each box runs one engine (SmolLM2-135M, the default small model, on "
              f"its cores), answers capped at {ASK_TOKENS} tokens.",
              f"- search: new queries, {a['clients']} clients for {a['seconds']:g} s;",
              f"- ask, hits: {a['hit_questions']} questions per tenant asked once, then again by {a['clients']} "
              f"clients for {a['seconds']:g} s (the exact cache answers);",
              f"- ask, new: questions its tenant never asked before, {a['ask_clients']} clients for "
              f"{a['ask_seconds']:g} s (retrieval, then the engine, or retrieval only where the engine's estimated "
              "wait is over its budget: `degraded`)."]
    peer = r["layouts"][0]
    for kind, title in (("search", "/v1/search"), ("ask_hits", "/v1/ask, exact-cache hits"),
                        ("ask_new", "/v1/ask, new questions")):
        asks = kind.startswith("ask")
        lines += ["", f"**{title}**", "", "| layout | requests/s | vs one box of all cores | p50 ms | p99 ms | errors |"
                  + (" answered: exact hit / generated / degraded | generated/s | generated p50 / p99 ms |"
                     if asks else ""), "|---|---|---|---|---|---|" + ("---|---|---|" if asks else "")]
        for e in r["layouts"]:
            f, base = e[kind], peer[kind]
            ratio = f"{f['per_s'] / base['per_s']:.2f}x" if base["per_s"] else "-"
            row = f"| {e['layout']} | {f['per_s']} | {ratio} | {f['p50_ms']} | {f['p99_ms']} | {f['errors']} |"
            if asks:
                how, gen = f["answered"], f["generated"]
                row += (f" {how['exact']} / {how['none'] - how['degraded']} / {how['degraded']} | "
                        f"{f['generated_per_s']} | {gen['p50_ms'] or '-'} / {gen['p99_ms'] or '-'} |")
            lines.append(row)
    lines += ["", "Ingest (the same 480 abstracts, 40 a request, one request at a time; with two or more boxes an "
              "ingest is acknowledged once both copies hold it):", "",
              "| layout | ingest s | exact cache filled (stored / asked) |", "|---|---|---|"]
    lines += [f"| {e['layout']} | {e['ingest_s']} | {e['fill']['stored']} / {e['fill']['asked']} |"
              for e in r["layouts"]]
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
