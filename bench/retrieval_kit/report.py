"""Machine facts and the Markdown report, all from the measured numbers only (verdicts: targets.py)."""
from __future__ import annotations

import machine  # bench/machine.py: bench/ is on sys.path

from .measure import PAGE_K, QUALITY_K, SPEED_K
from .targets import GROUPS

PACKAGES = ["rag-appliance", "onnxruntime", "usearch", "bm25s", "numpy", "faiss-cpu", "rank-bm25", "txtai", "torch",
            "httpx", "uvicorn"]


def machine_info(args) -> dict:
    return {**machine.machine_info(PACKAGES), "quick": args.quick, "clients": args.clients, "search_only_requests": args.search_only_requests}


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
              f"- Machine: {m['cpu_model']}, SIMD flags: {', '.join(m.get('cpu_simd', [])) or 'none recorded'}; "
              f"{m['cores']} cores ({m['cores_usable']} usable), "
              f"{m['memory_gib']} GiB RAM, Python {m['python']}",
              "- Packages: " + ", ".join(f"{k} {v}" for k, v in m["packages"].items() if v), "",
              "How it is measured:",
              f"- Quality: every judged query; nDCG@10 and MRR@10 from a k = {PAGE_K} search (the page a client "
              f"asks for), recall@100 from a second search of {QUALITY_K} chunks; documents ranked by their best "
              "chunk (the product's `appliance.evaluate` procedure and metrics for every system).",
              f"- Latency: one query at a time, k = {SPEED_K}, query encoding included, HTTP excluded.",
              f"- Throughput: {m['clients']} concurrent clients, k = {SPEED_K}; ours as asyncio tasks in-process (like "
              "for like with the peers' threads) and over HTTP against the real server on loopback (the clients share "
              "the machine's cores with the server).",
              "- Peers index the chunk texts and the vectors read back from the appliance's index (same embeddings), "
              "and encode queries with the same encoder. faiss+rank_bm25: exact inner product + BM25Okapi over the "
              "appliance's BM25 terms, RRF k = 60 over 10 x k from each list, one after the other. txtai: "
              "`Embeddings(hybrid=True, content=True)` with its defaults (BM25 on its own tokenizer, score fusion, "
              "faiss index type chosen by size); searches serialised under a lock as txtai's own Application does, "
              "because its content database shares one cursor.",
              "- Search only: every timed query's vectors (dense, plus token vectors for ours) are computed once "
              "beforehand with the same encoder; what is timed is everything after it. Ours: `HybridSearcher.search` "
              "over the partition's snapshot as `Appliance.search` calls it (the appliance's BM25 tokenizer and its "
              "search thread pool; only the encoder call and the microsecond partition pick left out). Peers: their "
              "own search given the vector (faiss+rank_bm25: tokenise, BM25Okapi scores, IndexFlatIP, RRF; txtai: "
              "`search` with the vector handed to its transform). Ours and txtai return chunk texts, faiss+rank_bm25 "
              f"row numbers only. Throughput: the same {m['clients']} clients; each system gets about 10 s of work (at "
              f"most {m.get('search_only_requests')} requests), faiss+rank_bm25 twice its timed queries.",
              ""]
    for name, ds in r["datasets"].items():
        lines += _dataset_section(name, ds)
    if "scale" in r:
        lines += _scale_section(r["scale"])
    lines += ["## What this shows", ""] + _findings(r) + [""] + _targets(r["targets"])
    return "\n".join(lines) + "\n"


def _targets(verdicts: list[dict]) -> list[str]:
    lines = ["## Targets (from the issue)", "",
             "Each target in both terms where both were measured: end to end (query encoding included, which every "
             "system shares) and search only (query vectors precomputed). Throughput targets compare hybrid against "
             "hybrid and ask for equal or better nDCG@10 as well.", ""]
    for group in GROUPS:
        lines += [f"### {group}", ""]
        for v in (v for v in verdicts if v["group"] == group):
            state = {True: "MET", False: "NOT MET", None: "NO VERDICT"}[v["met"]]
            terms = f"[{v['terms']}] " if v["terms"] else ""
            note = f" ({v['note']})" if v.get("note") else ""
            said = ": ".join(str(x) for x in (v["what"], v["measured"]) if x)
            lines.append(f"- {state}: {terms}{said}{note}")
        lines.append("")
    return lines


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
        out += _search_only_findings(name, o.get("search_only", {}), o["latency"], ds.get("peers", {}))
    s = r.get("scale")
    for label in ("hybrid", "hybrid+late") if s else ():
        if label in s:
            st = s[label]
            out.append(f"- At {s['chunks']:,} chunks, {label} p99 is {st['p99_ms']} ms; the p99 of query encoding "
                       f"alone is {st['stages_p99_ms'].get('encode')} ms.")
    on = (s or {}).get("cold", {}).get("prefetch on")
    if on:
        ratio = on["first"]["p99_ms"] / on["warm"]["p99_ms"]
        out.append(f"- At {s['chunks']:,} chunks after a boot with prefetch, the first {s['cold']['queries']} queries' "
                   f"p99 is {on['first']['p99_ms']} ms, {ratio:.2f}x the warm {on['warm']['p99_ms']} ms (target: "
                   f"within 2x: {'met' if ratio <= 2 else 'not met'}).")
    if s and "search_only" in s:
        out += _search_only_findings(f"{s['chunks']:,} chunks", s["search_only"],
                                     {k: s[k] for k in ("hybrid", "hybrid+late") if k in s}, s.get("peers", {}))
    return out


def _search_only_findings(where: str, search_only: dict, end_to_end: dict, peers: dict) -> list[str]:
    """How much of a query the encoder takes, and how the engines alone compare."""
    out = []
    for label, so in search_only.items():
        e2e, alone = end_to_end[label]["p50_ms"], so["latency"]["p50_ms"]
        vs = [f"{so['throughput']['qps'] / p['search_only']['throughput']['qps']:.1f}x {peer}"
              for peer, p in peers.items() if "search_only" in p]
        out.append(f"- {where}, ours {label}: p50 {e2e} ms end to end, {alone} ms search only (the difference, "
                   f"{max(e2e - alone, 0) / e2e:.0%}, is query encoding and its batching); search-only throughput "
                   f"{so['throughput']['qps']} queries/s" + (f" = {', '.join(vs)}." if vs else "."))
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
    lines += ["", f"p50/p99 here are per k = {PAGE_K} page search, query encoding included (the recall search is "
              "not timed); faiss+rank_bm25 times one pass that yields its three rankings."]
    short = [f"{label} returned {q['hits_for_k150']}" for label, q in ours["quality"].items()
             if q.get("hits_for_k150", QUALITY_K) < QUALITY_K]
    if short:
        lines.append(f"Asked for {QUALITY_K} chunks, ours " + ", ".join(short) + " (a probe query): recall@100 is "
                     "computed over those only.")
    lines.append("")
    lines += ["### Speed, end to end (query encoding included)", "",
              "| system | p50 ms | p99 ms | queries/s (32 clients) | timed on |", "|---|---|---|---|---|"]
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
        lines.append(f"| {_peer_label(peer, p)} | {p['latency']['p50_ms']} | {p['latency']['p99_ms']} | "
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
    if "search_only" in ours:
        lines += _search_only_table(ours, ds.get("peers", {}), f"{name}: search only (query vectors precomputed)")
    return lines + [""]


def _search_only_table(ours: dict, peers: dict, title: str) -> list[str]:
    lines = ["", f"### {title}", "",
             "| system | p50 ms | p99 ms | queries/s (32 clients) | under load: client p50 / p99 ms | timed on |",
             "|---|---|---|---|---|---|"]
    rows = [(f"ours {_label(label, ours)}", so) for label, so in ours["search_only"].items()]
    rows += [(_peer_label(peer, p), p["search_only"]) for peer, p in peers.items() if "search_only" in p]
    for label, so in rows:
        lat, t = so["latency"], so["throughput"]
        lines.append(f"| {label} | {lat['p50_ms']} | {lat['p99_ms']} | {t['qps']} | {t['client_p50_ms']} / "
                     f"{t['client_p99_ms']} | {lat['n']} queries / {t['requests']} requests |")
    skipped = [f"{peer}: {p['skipped']}" for peer, p in peers.items() if "skipped" in p]
    if skipped:
        lines += ["", "Not measured: " + "; ".join(skipped) + "."]
    pairs = [(label, so, peer, p["search_only"]) for label, so in ours["search_only"].items()
             for peer, p in peers.items() if "search_only" in p]
    if pairs:
        lines += ["", "Ratios, ours / peer, search only (< 1 is better for latency, > 1 for queries/s):", "",
                  "| ours | peer | p50 | p99 | queries/s |", "|---|---|---|---|---|"]
        for label, so, peer, po in pairs:
            row = [_ratio(so["latency"]["p50_ms"], po["latency"]["p50_ms"]),
                   _ratio(so["latency"]["p99_ms"], po["latency"]["p99_ms"]),
                   _ratio(so["throughput"]["qps"], po["throughput"]["qps"])]
            lines.append(f"| {_label(label, ours)} | {peer} | " + " | ".join(row) + " |")
    return lines


def _peer_label(peer: str, p: dict) -> str:
    return f"{peer} ({p['index_type']})" if p.get("index_type") else peer


def _label(label: str, ours: dict) -> str:
    late = label == "hybrid+late" and ours.get("late_candidates")
    return f"{label} ({ours['late_candidates']} candidates)" if late else label


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
             "### End to end (query encoding included)", "",
             "| search | p50 ms | p99 ms | p99 by stage (ms) |", "|---|---|---|---|"]
    for label in ("hybrid", "hybrid+late"):
        if label in s:
            st = s[label]
            stages = ", ".join(f"{k} {v}" for k, v in st["stages_p99_ms"].items())
            lines.append(f"| {label} | {st['p50_ms']} | {st['p99_ms']} | {stages} |")
    lines += ["", f"- Version folder on disk: {_mib(mem['version_folder_bytes'])}; token shards: {tokens}.",
              f"- RSS growth after opening: {_rss(mem['rss_growth_open'])}; after the queries: "
              f"{_rss(mem['rss_growth_after_queries'])}"
              + (f" ({mem['queries_before_rss']} queries)" if "queries_before_rss" in mem else "")
              + (f"; after the search-only runs ({mem['requests_before_rss_search_only']:,} more requests): "
                 f"{_rss(mem['rss_growth_after_search_only'])}" if "rss_growth_after_search_only" in mem else "")
              + ". The index files are memory-mapped: their pages count as file-backed once touched (page cache the "
              "kernel can drop), the heap as anonymous."]
    lines += _cold_table(s.get("cold"))
    if "search_only" in s:
        peers = s.get("peers", {})
        lines += _search_only_table({"search_only": s["search_only"]}, peers,
                                    f"Search only at {s['chunks']:,} chunks (query vectors precomputed)")
        slow = peers.get("faiss+rank_bm25", {}).get("timed_queries")
        lines += ["", "The peers index the same chunk texts and vectors, read back from this partition; quality is "
                  "not judged here (perturbed copies). "
                  + (f"faiss+rank_bm25 is timed on {slow} queries only: rank_bm25 scores every chunk in Python."
                     if slow else "")
                  + (" Its dense half is IVF-PQ with exact re-scoring of its candidates (RFlat), as a user at this "
                     "size would pick." if "IVF" in peers.get("faiss+rank_bm25", {}).get("index_type", "") else "")]
        lines += _build_table(s, peers)
    return lines + [""]


def _cold_table(cold: dict | None) -> list[str]:
    if not cold:
        return []
    search = "hybrid+late" if cold["late"] else "hybrid"
    lines = ["", f"### After a boot: the first {cold['queries']} queries ({search}, end to end)", "",
             "The partition's files dropped from the page cache (posix_fadvise DONTNEED, nothing mapping them), the "
             "partition opened and warmed as the server's boot does (prefetch on: its read of the index files, at "
             "most `index.warm_max_mib` and half the available memory; off: none; then one search), the first "
             "queries one at a time, then the same queries again (warm).", "",
             "| prefetch | first: p50 / p99 ms | warm: p50 / p99 ms | first p99 / warm p99 | first: late stage p50 / "
             "p99 ms | warm: late stage p50 / p99 ms | warm-up ms (MiB read) |", "|---|---|---|---|---|---|---|"]
    for label in ("prefetch off", "prefetch on"):
        c = cold.get(label)
        if c:
            f, w = c["first"], c["warm"]
            lines.append(f"| {label.split()[1]} | {f['p50_ms']} / {f['p99_ms']} | {w['p50_ms']} / {w['p99_ms']} | "
                         f"{_ratio(f['p99_ms'], w['p99_ms'])} | {f['late_p50_ms']} / {f['late_p99_ms']} | "
                         f"{w['late_p50_ms']} / {w['late_p99_ms']} | {c['warm_up_ms']} ({c['prefetched_mib']}) |")
    return lines


def _build_table(s: dict, peers: dict) -> list[str]:
    """Build time, disk and memory per system at scale (a peer's RSS growth is measured around its build)."""
    mem, build = s["memory"], s["build"]
    disk = mem["version_folder_bytes"] + mem["token_shard_bytes"]
    tokens = " incl. token vectors" if build.get("token_vectors") else ""
    lines = ["", "| system | index build s | on disk | RSS growth | notes |", "|---|---|---|---|---|",
             f"| ours | {build['build_s']} | {_mib(disk)} | {_rss(mem['rss_growth_after_queries'])} (after the "
             f"queries) | `build_version`{tokens}; disk = version folder + token shards |"]
    for peer, p in peers.items():
        if "skipped" in p:
            lines.append(f"| {peer} | > {p['build_s']} | | | skipped: {p['skipped']} |")
            continue
        m = p["memory"]
        notes = "; ".join(x for x in (m.get("disk_note"), p.get("note")) if x)
        lines.append(f"| {_peer_label(peer, p)} | {p['build_s']} | {_mib(m['disk_bytes'])} | "
                     f"{_rss(m['rss_growth_build'])} (its build) | {notes} |")
    return lines


def _rss(growth: dict[str, int]) -> str:
    return f"{_mib(growth['anon'])} anonymous + {_mib(growth['file'])} file-backed"


def _mib(n: int | None) -> str:
    return "n/a" if n is None else f"{n / 2**20:,.1f} MiB"
