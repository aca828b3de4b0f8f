"""Machine facts, target verdicts and the Markdown report, all from the measured numbers only."""
from __future__ import annotations

import datetime
import os
import platform
import shlex
import subprocess
import sys
from importlib import metadata

from .data import REPO
from .measure import QUALITY_K, SPEED_K

PEER_A, PEER_B = "faiss+rank_bm25", "txtai"
PACKAGES = ["rag-appliance", "onnxruntime", "usearch", "bm25s", "numpy", "faiss-cpu", "rank-bm25", "txtai", "torch",
            "httpx", "uvicorn"]


def machine_info(args) -> dict:
    cpu = next((line.split(":", 1)[1].strip() for line in open("/proc/cpuinfo") if line.startswith("model name")),
               platform.processor())
    mem = next((int(line.split()[1]) * 1024 for line in open("/proc/meminfo") if line.startswith("MemTotal")), 0)
    python = os.path.relpath(sys.executable, REPO) if sys.executable.startswith(str(REPO)) else sys.executable
    versions = {}
    for name in PACKAGES:
        try:
            versions[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            versions[name] = None
    return {
        "command": shlex.join([python, os.path.relpath(sys.argv[0], REPO), *sys.argv[1:]]),
        "date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
        "cpu_model": cpu, "cores": os.cpu_count(), "cores_usable": len(os.sched_getaffinity(0)),
        "memory_gib": round(mem / 2**30, 1), "python": platform.python_version(), "packages": versions,
        "commit": _git("rev-parse", "--short", "HEAD"), "uncommitted_changes": bool(_git("status", "--porcelain")),
        "quick": args.quick, "clients": args.clients, "load_average_at_start": [round(x, 2) for x in os.getloadavg()],
    }


def _git(*cmd: str) -> str | None:
    done = subprocess.run(["git", *cmd], cwd=REPO, capture_output=True, text=True)
    return done.stdout.strip() if done.returncode == 0 else None


def targets(results: dict) -> list[dict]:
    """Each target with the measured number and met / not met; a missing measurement says so."""
    out = []
    sci = results["datasets"].get("scifact")
    if sci:
        for label in ("hybrid", "hybrid+late"):
            value = sci["ours"]["quality"].get(label, {}).get("ndcg@10")
            if value is not None:
                out.append(_verdict(f"SciFact {label} nDCG@10 >= 0.69", value, value >= 0.69))
    scale = results.get("scale")
    if scale:
        for label in ("hybrid", "hybrid+late"):
            if label in scale:
                p99 = scale[label]["p99_ms"]
                out.append(_verdict(f"p99 <= 15 ms at {scale['chunks']:,} chunks ({label}, query encoding included)",
                                    f"{p99} ms", p99 <= 15))
    for name, ds in results["datasets"].items():
        o = ds["ours"]
        for peer, factor in ((PEER_A, 20), (PEER_B, 2)):
            p = ds.get("peers", {}).get(peer)
            if not p:
                continue
            peer_ndcg, peer_qps = p["quality"]["hybrid"]["ndcg@10"], p["throughput"]["qps"]
            runs = [(label, "in-process", t) for label, t in o["throughput_inprocess"].items()]
            if "throughput_http" in o:
                runs.append((o["default"], "HTTP", o["throughput_http"]))
            for label, how, t in runs:
                ours_ndcg, ratio = o["quality"][label]["ndcg@10"], t["qps"] / peer_qps
                out.append(_verdict(
                    f"{name}: ours {label} ({how}) >= {factor}x {peer} queries/s at equal or better nDCG@10",
                    f"{ratio:.1f}x ({t['qps']} vs {peer_qps} q/s), nDCG@10 {ours_ndcg:.4f} vs {peer_ndcg:.4f}",
                    ratio >= factor and ours_ndcg >= peer_ndcg))
    return out


def _verdict(target: str, measured, met: bool) -> dict:
    return {"target": target, "measured": measured, "met": bool(met)}


def markdown(r: dict) -> str:
    m = r["meta"]
    lines = ["# Retrieval benchmark", ""]
    if m["quick"]:
        lines += ["**QUICK RUN on small subsets: for debugging only, not a result.**", ""]
    dirty = " plus uncommitted changes" if m.get("uncommitted_changes") else ""
    lines += [f"- Command: `{m['command']}` (`just bench-retrieval` runs it without flags)",
              f"- Date: {m['date']}; commit: {m['commit'] or 'none yet'}{dirty}; wall time {m['wall_s']} s",
              f"- Load average (1, 5, 15 min) at start: {m['load_average_at_start']}, at end: "
              f"{m['load_average_at_end']} (anything else running on the box shows here)",
              f"- Machine: {m['cpu_model']}, {m['cores']} cores ({m['cores_usable']} usable), "
              f"{m['memory_gib']} GiB RAM, Python {m['python']}",
              "- Packages: " + ", ".join(f"{k} {v}" for k, v in m["packages"].items() if v), "",
              "How it is measured:",
              f"- Quality: every judged query, {QUALITY_K} chunks fetched, ranked by best chunk per document "
              "(the product's `appliance.evaluate` metrics for every system).",
              f"- Latency: one query at a time, k = {SPEED_K}, query encoding included, HTTP excluded.",
              f"- Throughput: {m['clients']} concurrent clients, k = {SPEED_K}; ours as asyncio tasks in-process (like "
              "for like with the peers' threads) and over HTTP against the real server on loopback (the clients share "
              "the machine's cores with the server).",
              "- Peers index the chunk texts and the vectors read back from the appliance's index (same embeddings), "
              "and encode queries with the same encoder. faiss+rank_bm25: exact inner product + BM25Okapi over the "
              "appliance's BM25 terms, RRF k = 60 over 10 x k from each list, one after the other. txtai: "
              "`Embeddings(hybrid=True, content=True)` with its defaults (BM25 on its own tokenizer, score fusion, "
              "faiss index type chosen by size); searches serialised under a lock as txtai's own Application does, "
              "because its content database shares one cursor.", ""]
    for name, ds in r["datasets"].items():
        lines += _dataset_section(name, ds)
    if "scale" in r:
        lines += _scale_section(r["scale"])
    lines += ["## What this shows / targets", ""] + _findings(r) + ["", "Targets (from the issue):", ""]
    lines += [f"- {'MET' if t['met'] else 'NOT MET'}: {t['target']}: {t['measured']}" for t in r["targets"]]
    return "\n".join(lines) + "\n"


def _findings(r: dict) -> list[str]:
    """A few facts read straight off the tables, to help reading them."""
    out = []
    for name, ds in r["datasets"].items():
        o = ds["ours"]
        systems = {f"ours {k}": q["ndcg@10"] for k, q in o["quality"].items() if "ndcg@10" in q}
        for peer, v in ds.get("peers", {}).items():
            systems.update({f"{peer} {k}": q["ndcg@10"] for k, q in v["quality"].items()})
        best = max(systems, key=systems.get)
        out.append(f"- {name}: best nDCG@10 is {best} ({systems[best]:.4f}); ours hybrid {systems['ours hybrid']:.4f}.")
        if "throughput_http" in o:
            inproc = o["throughput_inprocess"][o["default"]]["qps"]
            http = o["throughput_http"]["qps"]
            out.append(f"- {name}: over HTTP the server's default ({o['default']}) serves {http} queries/s, "
                       f"{http / inproc:.0%} of the {inproc} in-process.")
    s = r.get("scale")
    for label in ("hybrid", "hybrid+late") if s else ():
        if label in s:
            st = s[label]
            out.append(f"- At {s['chunks']:,} chunks, {label} p99 is {st['p99_ms']} ms; the p99 of query encoding "
                       f"alone is {st['stages_p99_ms'].get('encode')} ms.")
    return out


def _dataset_section(name: str, ds: dict) -> list[str]:
    d, ours = ds["dataset"], ds["ours"]
    cache = "cached index" if d["cached"] else "ingested in this run"
    lines = [f"## {name}: {d['name']} ({d['language']}, encoder {d['encoder']})", "",
             f"{d['documents']} documents -> {d['chunks']} chunks ({cache}; ingest took {d['ingest_s']} s), "
             f"{d['judged_queries']} judged queries; {d['speed_queries']} distinct queries timed, "
             f"{d['throughput_requests']} requests per throughput run.", "",
             "### Quality", "", "| system | nDCG@10 | recall@100 | MRR@10 | p50 ms | p99 ms |",
             "|---|---|---|---|---|---|"]
    for label, q in ours["quality"].items():
        lines.append(_quality_row(f"ours {_label(label, ours)}", q))
    for peer, p in ds.get("peers", {}).items():
        for kind, q in p["quality"].items():
            lines.append(_quality_row(f"{peer} {kind}", q))
    lines += ["", "p50/p99 here are per quality query (k = 150 chunks); faiss+rank_bm25 times one pass that yields "
              "its three rankings."]
    short = [f"{label} returned {q['hits_for_k150']}" for label, q in ours["quality"].items()
             if q.get("hits_for_k150", QUALITY_K) < QUALITY_K]
    if short:
        lines.append(f"Asked for {QUALITY_K} chunks, ours " + ", ".join(short) + " (a probe query): recall@100 is "
                     "computed over those only.")
    lines.append("")
    lines += ["### Speed", "", "| system | p50 ms | p99 ms | queries/s (32 clients) | timed on |",
              "|---|---|---|---|---|"]
    for label, lat in ours["latency"].items():
        t = ours["throughput_inprocess"][label]
        lines.append(f"| ours {_label(label, ours)} (in-process) | {lat['p50_ms']} | {lat['p99_ms']} | {t['qps']} | "
                     f"{lat['n']} queries / {t['requests']} requests |")
    http = ours.get("throughput_http")
    if http:
        lines.append(f"| ours {_label(ours['default'], ours)} (HTTP, the server's default) | | | {http['qps']} | "
                     f"{http['requests']} requests, {http['errors']} errors |")
        lines.append(f"| (HTTP ceiling: GET /healthz, same clients) | | | {http['healthz_qps']} | |")
    for peer, p in ds.get("peers", {}).items():
        extra = f" ({p['index_type']})" if p.get("index_type") else ""
        lines.append(f"| {peer}{extra} | {p['latency']['p50_ms']} | {p['latency']['p99_ms']} | "
                     f"{p['throughput']['qps']} | {p['timed_queries']} queries / {p['throughput']['requests']} "
                     "requests |")
    if ds.get("peers"):
        lines += ["", "Ratios, ours / peer (hybrid vs hybrid; > 1 is better for nDCG and queries/s, < 1 is better "
                  "for latency):", "", "| ours | peer | nDCG@10 | p50 | p99 | queries/s in-process | queries/s HTTP |",
                  "|---|---|---|---|---|---|---|"]
        for label, lat in ours["latency"].items():
            t = ours["throughput_inprocess"][label]
            for peer, p in ds["peers"].items():
                row = [_ratio(ours["quality"][label]["ndcg@10"], p["quality"]["hybrid"]["ndcg@10"], 3),
                       _ratio(lat["p50_ms"], p["latency"]["p50_ms"]), _ratio(lat["p99_ms"], p["latency"]["p99_ms"]),
                       _ratio(t["qps"], p["throughput"]["qps"]),
                       _ratio(http["qps"], p["throughput"]["qps"]) if http and label == ours["default"] else "n/a"]
                lines.append(f"| {_label(label, ours)} | {peer} | " + " | ".join(row) + " |")
    return lines + [""]


def _label(label: str, ours: dict) -> str:
    return f"{label} ({ours['late_candidates']} candidates)" if label == "hybrid+late" else label


def _quality_row(label: str, q: dict) -> str:
    if "ndcg@10" not in q:
        return f"| {label} | n/a | n/a | n/a | n/a | n/a |"
    return (f"| {label} | {q['ndcg@10']:.4f} | {q['recall@100']:.4f} | {q['mrr@10']:.4f} | {q['p50_ms']} | "
            f"{q['p99_ms']} |")


def _ratio(a: float, b: float, digits: int = 2) -> str:
    return f"{a / b:.{digits}f}" if b else "n/a"


def _scale_section(s: dict) -> list[str]:
    mem = s["memory"]
    tokens = (f"{_mib(mem['token_shard_bytes'])} (written)" if mem["token_shard_bytes"]
              else f"not written; ~{_mib(mem['token_shard_bytes_estimated'])} estimated from SciFact's bytes per chunk"
              if mem["token_shard_bytes_estimated"] else "none")
    lines = [f"## Scale: one partition of {s['chunks']:,} chunks", "",
             "SciFact chunks repeated with small perturbations (vector noise, a word dropped and two swapped), written "
             f"with `build_version` in {s['build']['build_s']} s; searched like `Appliance.search` (micro-batched "
             "encoder, default settings), one query at a time, k = 10.", "",
             "| search | p50 ms | p99 ms | p99 by stage (ms) |", "|---|---|---|---|"]
    for label in ("hybrid", "hybrid+late"):
        if label in s:
            st = s[label]
            stages = ", ".join(f"{k} {v}" for k, v in st["stages_p99_ms"].items())
            lines.append(f"| {label} | {st['p50_ms']} | {st['p99_ms']} | {stages} |")
    lines += ["", f"- Version folder on disk: {_mib(mem['version_folder_bytes'])}; token shards: {tokens}.",
              f"- RSS growth after opening: {_rss(mem['rss_growth_open'])}; after the queries: "
              f"{_rss(mem['rss_growth_after_queries'])}. The index files are memory-mapped: their pages count as "
              "file-backed once touched (page cache the kernel can drop), the heap as anonymous.", ""]
    return lines


def _rss(growth: dict[str, int]) -> str:
    return f"{_mib(growth['anon'])} anonymous + {_mib(growth['file'])} file-backed"


def _mib(n: int | None) -> str:
    return "n/a" if n is None else f"{n / 2**20:,.1f} MiB"
