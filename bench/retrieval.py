"""Retrieval benchmark: the appliance against faiss + rank_bm25 and txtai, on SciFact (English) and CMRC (Chinese).

    .venv/bin/python bench/retrieval.py            # the full run (`just bench-retrieval`)
    .venv/bin/python bench/retrieval.py --quick    # a few hundred documents per set, for debugging

Writes bench/results/retrieval.md and .json (quick runs: bench/.cache/retrieval-quick.*). Ingested indexes are
cached under bench/.cache/, so only the first run pays for encoding. Everything runs one step after another on the
same machine, so no two measurements compete for the cores.

Each system is timed twice: end to end (query encoding included; every system uses the same encoder, which
dominates) and search only (query vectors computed beforehand: retrieval_kit/searchonly.py). The scale step times
ours on a ~100k-chunk partition, then the peers built over the same chunks and vectors (retrieval_kit/scalepeers.py).
"""
from __future__ import annotations

import argparse
import asyncio
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))  # the retrieval_kit package beside this file

from appliance.encode import load_encoder  # noqa: E402  (onnxruntime before usearch: see MODELS.md)
from appliance.evaluate import EVAL_PARTITION  # noqa: E402
from appliance.paths import model_folder  # noqa: E402
from appliance.retrieve import Target  # noqa: E402

import machine  # noqa: E402
from retrieval_kit.kit import StageKit  # noqa: E402
from retrieval_kit import ours, peers, report, scale, scalepeers, targets  # noqa: E402
from retrieval_kit.data import (  # noqa: E402
    CACHE, DATASETS, REPO, all_queries, eval_snapshot, load_dataset, make_settings, open_appliance, read_corpus,
)
from retrieval_kit.measure import (  # noqa: E402
    PAGE_K, QUALITY_K, SPEED_K, latency_stats, rounds_for, score_rankings, sequential_latency, thread_throughput,
)
from retrieval_kit.searchonly import OursSearchOnly, QueryVectors, encode_queries, measure_peer  # noqa: E402


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--quick", action="store_true", help="small subsets (debugging); results go to bench/.cache")
    p.add_argument("--datasets", default="scifact,cmrc", help="comma-separated: scifact, cmrc")
    p.add_argument("--skip-peers", action="store_true")
    p.add_argument("--skip-http", action="store_true")
    p.add_argument("--skip-scale", action="store_true")
    p.add_argument("--skip-search-only", action="store_true",
                   help="skip the search-only timings (query vectors precomputed); also skips the peers at scale")
    p.add_argument("--skip-scale-peers", action="store_true", help="skip building and timing the peers at scale")
    p.add_argument("--clients", type=int, default=32, help="concurrent clients for throughput")
    p.add_argument("--speed-queries", type=int, default=1000, help="distinct queries timed per system (at most)")
    p.add_argument("--min-requests", type=int, default=1000,
                   help="throughput: repeat the distinct queries until at least this many requests")
    p.add_argument("--slow-queries", type=int, default=100,
                   help="faiss+rank_bm25 is timed on this many queries only (rank_bm25 scores every chunk in Python)")
    p.add_argument("--search-only-requests", type=int, default=3000,
                   help="search-only throughput: ~10 s of work per system, at most this many requests")
    p.add_argument("--scale-slow-queries", type=int, default=30,
                   help="at scale, faiss+rank_bm25 is timed on this many queries only (~0.1 s each at 100k)")
    p.add_argument("--txtai-scale-limit", type=float, default=600,
                   help="seconds: txtai's build at scale is abandoned (and reported skipped) past this")
    p.add_argument("--scale-chunks", type=int, default=None, help="default 100000 (quick: 10000)")
    p.add_argument("--scale-late", choices=["auto", "yes", "no"], default="auto",
                   help="write token vectors at scale and time late interaction (~75 KB per chunk on disk); "
                        "auto: when the product's default search uses late interaction")
    p.add_argument("--out", type=Path, default=None, help="output path without suffix")
    args = p.parse_args(argv)
    args.scale_chunks = args.scale_chunks or (10_000 if args.quick else 100_000)
    args.out = args.out or (CACHE / "retrieval-quick" if args.quick else REPO / "bench" / "results" / "retrieval")
    return args


QUICK = {"scifact": (100, 400), "cmrc": (100, 300)}  # judged queries, documents


async def bench_dataset(name: str, args, log) -> tuple[dict, Path | None]:
    spec = DATASETS[name]
    queries, docs = QUICK[name] if args.quick else (None, None)
    data = load_dataset(spec, queries, docs)
    log(f"[{name}] {len(data.corpus)} documents, {len(data.queries)} judged queries, encoder {spec.encoder}")
    app, folder, ingest = await open_appliance(spec, data, "quick" if args.quick else "full", log)
    speed = all_queries(spec, data.queries, args.quick)[:args.speed_queries]
    load = rounds_for(speed, args.min_requests)
    out: dict = {"dataset": {"name": spec.folder.name, "language": spec.language, "encoder": spec.encoder,
                             "documents": len(data.corpus), "judged_queries": len(data.queries),
                             "speed_queries": len(speed), "throughput_requests": len(load), **ingest}}
    try:
        snapshot = eval_snapshot(app)
        has_tokens = snapshot.has_token_vectors
        source_version = snapshot.folder
        log(f"  ours: quality (k={PAGE_K} page + k={QUALITY_K} for recall, sequential)")
        quality = await ours.quality(app, data, has_tokens, log)
        configs = [("hybrid", False)] + ([("hybrid+late", True)] if has_tokens else [])
        latency, inproc = {}, {}
        for label, late in configs:
            log(f"  ours {label}: latency (k={SPEED_K}, sequential, {len(speed)} queries), then throughput "
                f"({args.clients} asyncio clients, {len(load)} requests)")
            latency[label] = await ours.latency(app, speed, late=late)
            inproc[label] = await ours.inprocess_throughput(app, load, args.clients, late)
            log(f"    {latency[label]}\n    {inproc[label]}")
        vectors, search_only = None, {}
        if not args.skip_search_only:
            kit = await StageKit.open(app.settings)
            try:
                vectors = await encode_queries(kit.batcher, speed)
                log(f"  ours search-only: {len(vectors)} query vectors precomputed in {vectors.encode_s} s")
                engine = OursSearchOnly(kit.searcher, kit.tokenizer, [Target(EVAL_PARTITION, snapshot)], vectors)
                for label, late in configs:
                    search_only[label] = await engine.measure(late, args.clients, args.search_only_requests)
                    log(f"    {label}: {search_only[label]}")
            finally:
                await kit.stop()
        retrieve = app.settings.retrieve
        default = "hybrid+late" if retrieve.late_interaction and has_tokens else "hybrid"
        corpus = read_corpus(app) if not args.skip_peers else None
    finally:
        await app.stop()
    out["ours"] = {"quality": quality, "latency": latency, "throughput_inprocess": inproc, "default": default,
                   "late_candidates": retrieve.late_candidates}
    if search_only:
        out["ours"]["search_only"] = search_only
    if not args.skip_http:
        log(f"  ours {default} (the server's default): HTTP throughput ({args.clients} clients, loopback)")
        out["ours"]["throughput_http"] = await ours.http_throughput(folder, spec.encoder, load, args.clients)
        log(f"    {out['ours']['throughput_http']}")
    if corpus is not None:
        out["peers"] = await asyncio.to_thread(bench_peers, spec, data, corpus, speed, load, vectors, args, log)
    return out, (source_version if spec.encoder == "minilm" else None)


def bench_peers(spec, data, corpus, speed: list[str], load: list[str], vectors: QueryVectors | None, args,
                log) -> dict:
    settings = make_settings(CACHE / "unused", spec.encoder)
    encoder = load_encoder(spec.encoder, model_folder(settings.models_dir, spec.encoder), settings.encoder.threads,
                           settings.encoder.max_length, settings.encoder.graph)
    results = {}
    for cls in (peers.FaissRankBM25, peers.TxtaiHybrid):
        log(f"  {cls.name}: building over {len(corpus.texts)} chunks")
        peer = cls(corpus, encoder)
        slow = cls is peers.FaissRankBM25
        timed = speed[:args.slow_queries] if slow else speed
        requests = rounds_for(timed, min(args.min_requests, 2 * len(timed))) if slow else load
        page, deep, quality_ms = peers.quality(peer, corpus, data, PAGE_K, QUALITY_K)
        quality = {kind: {**score_rankings(data, r, deep[kind]), **{k: v for k, v in latency_stats(quality_ms).items()
                                                                    if k != "n"}} for kind, r in page.items()}
        for kind, q in quality.items():
            log(f"    {cls.name} {kind:8s} nDCG@10 {q['ndcg@10']:.4f}  R@100 {q['recall@100']:.4f}")
        search = peer.search
        result = {"build_s": peer.build_s, "quality": quality,
                  "latency": sequential_latency(lambda q: search(q, SPEED_K), timed),
                  "throughput": thread_throughput(lambda q: search(q, SPEED_K), requests, args.clients),
                  "timed_queries": len(timed)}
        if hasattr(peer, "index_type"):
            result["index_type"] = peer.index_type
        log(f"    latency {result['latency']}\n    throughput {result['throughput']}")
        if vectors is not None:  # after the end-to-end runs: txtai keeps the vectors it is handed
            result["search_only"] = measure_peer(peer, vectors.head(len(timed)), args.clients,
                                                 args.search_only_requests, len(requests) if slow else None)
            log(f"    search-only {result['search_only']}")
        results[cls.name] = result
        peer = search = None  # free this peer's index before the next one is built
    return results


async def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    started = time.perf_counter()
    log = machine.progress_log(started)

    results: dict = {"meta": report.machine_info(args), "datasets": {}}
    scale_source, scale_default_late = None, False
    for name in [d.strip() for d in args.datasets.split(",") if d.strip()]:
        results["datasets"][name], source = await bench_dataset(name, args, log)
        if source is not None and scale_source is None:
            scale_source, scale_default_late = source, results["datasets"][name]["ours"]["default"] == "hybrid+late"
    if not args.skip_scale:
        if scale_source is None:
            log("scale: skipped (needs the SciFact index as its source)")
        else:
            log(f"scale: {args.scale_chunks} chunks")
            judged = load_dataset(DATASETS["scifact"], *(QUICK["scifact"] if args.quick else (None, None)))
            late = args.scale_late == "yes" or (args.scale_late == "auto" and scale_default_late)
            search_only = None if args.skip_search_only else {"clients": args.clients,
                                                               "max_requests": args.search_only_requests}
            results["scale"], vectors = await scale.run(scale_source, args.scale_chunks,
                                                        list(judged.queries.values()), late, log, search_only)
            log(f"    {results['scale']}")
            if vectors is not None and not args.skip_scale_peers:  # what is measured so far is kept if they fail
                machine.write_results(args.out, results, report.markdown, started, targets.targets, log)
                results["scale"]["peers"] = await asyncio.to_thread(
                    scalepeers.run, Path(results["scale"]["version_folder"]), vectors, args.clients,
                    args.search_only_requests, args.scale_slow_queries, args.txtai_scale_limit, log)
    machine.write_results(args.out, results, report.markdown, started, targets.targets, log)
    return 0


if __name__ == "__main__":
    sys.exit(asyncio.run(main()))
