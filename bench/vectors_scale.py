"""Dense vectors at a million chunks: USearch HNSW at f16 (the product's default), i8 and b1, with and without an
exact rescoring of the best candidates from the memory-mapped f16 vectors, against faiss IVF-PQ, which a user at
this scale would pick.

Writes bench/results/vectors_scale.md and .json. Steps, one after another on the same box:
1. The vectors: SciFact's 8,540 chunk vectors (the partition bench/token_vectors.py caches), each copied with
   gaussian noise of 0.01 per dimension and re-normalised, as bench/retrieval.py's 100k partition is made; written
   once as f16 (`dense.npy`, as a partition version keeps them) under bench/.cache/vectors-<n>/.
2. The queries: SciFact's judged queries encoded by MiniLM, plus noisy copies up to 1,000; the truth is the exact
   top 10 by inner product over every vector.
3. Each index built with 2 threads and saved; then a fresh process serves it from the file (USearch memory-maps it
   with `view=True`, as the product does; faiss reads it into memory) and runs the 1,000 queries one at a time:
   build s, bytes on disk, RSS after the load and after the queries, p50/p99 ms, recall@10 against the truth.
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.machine import machine_info, progress_log, write_results  # noqa: E402
from bench.retrieval_kit.data import CACHE  # noqa: E402
from bench.vectors_kit import systems  # noqa: E402
from bench.vectors_kit.report import markdown  # noqa: E402

REPO = Path(__file__).resolve().parent.parent
SOURCE = CACHE / "tokens-scifact-residual" / "indexes" / "p000001"
SCIFACT = REPO.parent / "shared" / "data" / "beir_scifact"
NOISE = 0.01
QUERIES = 1000
K = 10


def parse_args(argv=None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--chunks", type=int, default=1_000_000)
    p.add_argument("--systems", default=",".join(systems.NAMES), help="comma-separated, of " + ", ".join(systems.NAMES))
    p.add_argument("--serve", default=None, help=argparse.SUPPRESS)  # internal: one system's serving process
    p.add_argument("--out", type=Path, default=REPO / "bench" / "results" / "vectors_scale")
    return p.parse_args(argv)


def make_vectors(folder: Path, n: int, log) -> np.ndarray:
    path = folder / "dense.npy"
    if path.exists() and np.load(path, mmap_mode="r").shape[0] == n:
        log(f"reusing {path}")
        return np.load(path, mmap_mode="r")
    from appliance.index import current_version

    base = np.load(current_version(SOURCE) / "dense.npy").astype(np.float32)
    folder.mkdir(parents=True, exist_ok=True)
    out = np.lib.format.open_memmap(folder / "dense.part.npy", mode="w+", dtype=np.float16, shape=(n, base.shape[1]))
    rng = np.random.default_rng(0)
    for start in range(0, n, 100_000):  # row i is a copy of base row i % len(base)
        rows = np.arange(start, min(n, start + 100_000))
        v = base[rows % len(base)] + rng.normal(0, NOISE, (len(rows), base.shape[1])).astype(np.float32)
        out[rows] = (v / np.linalg.norm(v, axis=1, keepdims=True)).astype(np.float16)
    out.flush()
    del out
    os.replace(folder / "dense.part.npy", path)
    log(f"wrote {n:,} vectors to {path}")
    return np.load(path, mmap_mode="r")


def make_queries(folder: Path, vectors: np.ndarray, log) -> tuple[np.ndarray, np.ndarray]:
    path = folder / "queries.npz"
    if path.exists():
        saved = np.load(path)
        return saved["queries"], saved["truth"]
    from appliance.encode import load_encoder
    from appliance.evaluate import load_beir

    judged = list(load_beir(SCIFACT).queries.values())
    dense = load_encoder("minilm", REPO / "models" / "build" / "minilm", graph="int8").encode(judged).dense
    rng = np.random.default_rng(1)
    extra = dense[rng.integers(0, len(dense), QUERIES - len(dense))] + rng.normal(0, NOISE, (QUERIES - len(dense),
                                                                                           dense.shape[1]))
    queries = np.concatenate([dense, extra]).astype(np.float32)
    queries /= np.linalg.norm(queries, axis=1, keepdims=True)
    log(f"exact top {K} of {len(queries)} queries over {len(vectors):,} vectors")
    best = np.full((len(queries), K), -np.inf, np.float32)
    best_ids = np.zeros((len(queries), K), np.int64)
    for start in range(0, len(vectors), 100_000):
        scores = queries @ np.asarray(vectors[start:start + 100_000], np.float32).T
        top = np.argpartition(-scores, K, axis=1)[:, :K]
        merged = np.concatenate([best, np.take_along_axis(scores, top, 1)], axis=1)
        merged_ids = np.concatenate([best_ids, top + start], axis=1)
        keep = np.argsort(-merged, axis=1)[:, :K]
        best, best_ids = np.take_along_axis(merged, keep, 1), np.take_along_axis(merged_ids, keep, 1)
    np.savez(path, queries=queries, truth=best_ids)
    return queries, best_ids


def serve(name: str, folder: Path) -> dict:
    """In a fresh process: load the saved index, run the queries one at a time, report latency, recall and RSS."""
    import psutil

    queries, truth = (np.load(folder / "queries.npz")[k] for k in ("queries", "truth"))
    vectors = np.load(folder / "dense.npy", mmap_mode="r")
    before = _memory()
    started = time.perf_counter()
    search = systems.load(name, folder, vectors)
    load_ms = (time.perf_counter() - started) * 1000
    loaded = _memory()
    ms, found = [], []
    for q in queries:
        started = time.perf_counter()
        ids = search(q, K)
        ms.append((time.perf_counter() - started) * 1000)
        found.append(ids)
    recall = float(np.mean([len(set(f) & set(t)) / K for f, t in zip(found, truth)]))
    return {"load_ms": round(load_ms, 1), "p50_ms": round(float(np.percentile(ms, 50)), 3),
            "p99_ms": round(float(np.percentile(ms, 99)), 3), "recall@10": round(recall, 4),
            "rss_start_mib": before[0], "rss_loaded_mib": loaded[0], "rss_after_mib": _memory()[0],
            "rss_anon_after_mib": _memory()[1], "threads": psutil.Process().num_threads()}


def _memory() -> tuple[float, float]:
    """(RSS, its anonymous part) in MiB: what the process holds, and what is not a mapped file the kernel can drop."""
    fields = dict(line.split(":", 1) for line in open("/proc/self/status"))
    return tuple(round(int(fields[k].split()[0]) / 1024, 1) for k in ("VmRSS", "RssAnon"))  # type: ignore[return-value]


def main(args) -> None:
    folder = CACHE / f"vectors-{args.chunks}"
    if args.serve:
        print(json.dumps(serve(args.serve, folder)))
        return
    started = time.perf_counter()
    log = progress_log(started)
    results = {"meta": machine_info(["rag-appliance", "usearch", "faiss-cpu", "numpy"]) | {
        "quick": args.chunks < 1_000_000, "chunks": args.chunks, "noise": NOISE, "queries": QUERIES, "k": K}}
    vectors = make_vectors(folder, args.chunks, log)
    make_queries(folder, vectors, log)
    results["systems"], results["steps"] = {}, {}
    for name in args.systems.split(","):
        log(f"{name}: building")
        step_started, load_before = time.perf_counter(), round(os.getloadavg()[0], 2)
        built = systems.build(name, folder, vectors)
        log(f"{name}: built in {built['build_s']} s, {built['disk_bytes'] / 2**20:.0f} MiB; serving")
        done = subprocess.run([sys.executable, __file__, "--chunks", str(args.chunks), "--serve", name],
                              capture_output=True, text=True)
        if done.returncode != 0:
            raise RuntimeError(f"{name}: serving failed\n{done.stderr[-3000:]}")
        results["systems"][name] = built | json.loads(done.stdout.strip().splitlines()[-1])
        results["steps"][name] = {"wall_s": round(time.perf_counter() - step_started, 1), "load_before": load_before,
                                  "load_after": round(os.getloadavg()[0], 2)}
        log(f"  {results['systems'][name]}")
        write_results(args.out, results, markdown, started, lambda r: {}, log)  # after each: a long run keeps its part


if __name__ == "__main__":
    main(parse_args())
