"""Part 1b: lookup latency with 100,000 stored entries, ours (SemanticCache.lookup) vs GPTCache (`get`), both
fed precomputed vectors, so only the lookup itself is timed."""
from __future__ import annotations

import tempfile
import time
from pathlib import Path

import numpy as np

from generation_kit.engine import Contention  # bench/ is on sys.path

from . import gpt

ENTRIES = 100_000
LOOKUPS = 2_000
WARMUP = 100
SEED = 7


def synthetic(vectors, texts_a: list[str], n: int) -> tuple[list[str], np.ndarray]:
    """n variants of the real questions: vector = normalise(v + sigma * g), g ~ N(0, I/dim), sigma uniform in
    [0.5, 1.5] (cosine to its source ~0.55-0.9), so the store has dense neighbourhoods as real traffic does."""
    rng = np.random.default_rng(SEED)
    src = rng.integers(0, len(texts_a), n)
    base = vectors.dense[[vectors.row[texts_a[i]] for i in src]]
    noise = rng.standard_normal(base.shape).astype(np.float32) / np.sqrt(base.shape[1])
    out = base + rng.uniform(0.5, 1.5, (n, 1)).astype(np.float32) * noise
    out /= np.linalg.norm(out, axis=1, keepdims=True)
    return [f"{texts_a[i]} (variant {k})" for k, i in enumerate(src)], out


def run(pairs, vectors, threshold: float, late: float, log) -> dict:
    from appliance.cache.semantic import SemanticCache, SemanticParams

    texts_a = list(dict.fromkeys(p.a for p in pairs))
    syn_texts, syn_vecs = synthetic(vectors, texts_a, ENTRIES - len(texts_a))
    texts = texts_a + syn_texts
    vecs = np.vstack([vectors.dense[[vectors.row[t] for t in texts_a]], syn_vecs]).astype(np.float32)
    queries = [p.b for p in pairs[:LOOKUPS]]
    qv = vectors.dense[[vectors.row[t] for t in queries]]
    qt = [vectors.tokens[vectors.row[t]] for t in queries] if vectors.tokens is not None else [None] * len(queries)
    out = {"entries": len(texts), "real_entries": len(texts_a), "synthetic_entries": len(syn_texts),
           "lookups": len(queries), "warmup_lookups": WARMUP}

    with tempfile.TemporaryDirectory() as tmp:
        params = SemanticParams(threshold=threshold, late_threshold=late, max_entries=200_000, ttl_s=1e9)
        cache = SemanticCache(Path(tmp) / "semantic", vecs.shape[1], params, 1 << 34)
        started = time.perf_counter()
        for i, text in enumerate(texts):
            tokens = vectors.tokens[vectors.row[text]] if i < len(texts_a) and vectors.tokens is not None else None
            cache.store("bench", "bench", text, vecs[i], {}, {"answer": text}, tokens)
        fill = time.perf_counter() - started
        log(f"latency: ours filled with {len(cache)} entries in {fill:.0f} s")
        for i in range(WARMUP):
            cache.lookup("bench", "bench", queries[-1 - i], qv[-1 - i], {}, qt[-1 - i])
        times, hits, busy = [], 0, Contention()
        for i, q in enumerate(queries):
            started = time.perf_counter()
            found = cache.lookup("bench", "bench", q, qv[i], {}, qt[i])
            times.append((time.perf_counter() - started) * 1000)
            hits += found.hit is not None
        cache.close()
    out["ours"] = _stats(times, hits) | busy.stop() | {"fill_s": round(fill, 1), "threshold": threshold, "late_threshold": late}
    log(f"latency: ours p50 {out['ours']['p50_ms']} ms p99 {out['ours']['p99_ms']} ms")

    row = {t: i for i, t in enumerate(texts)} | {q: len(texts) + i for i, q in enumerate(queries)}
    allv = np.vstack([vecs, qv])
    g = gpt.Gpt(vecs.shape[1], lambda text: allv[row[text]], 0.8)
    started = time.perf_counter()
    g.bulk(texts, texts, vecs)
    fill = time.perf_counter() - started
    log(f"latency: GPTCache filled ({g.data_manager.v.count()} vectors) in {fill:.0f} s")
    for i in range(WARMUP):
        g.get(queries[-1 - i])
    # at its default threshold, and at the threshold that means the same cosine as ours (fewer hits to fetch)
    for key, t in (("gptcache", 0.8), ("gptcache_same_cosine", round((1 + threshold) / 2, 4))):
        g.set_threshold(t)
        times, hits, busy = [], 0, Contention()
        for q in queries:
            started = time.perf_counter()
            answer = g.get(q)
            times.append((time.perf_counter() - started) * 1000)
            hits += answer is not None
        out[key] = _stats(times, hits) | busy.stop() | {"fill_s": round(fill, 1), "threshold": t,
                                                        "min_cosine": gpt.cos_of(t)}
        log(f"latency: GPTCache@{t} p50 {out[key]['p50_ms']} ms p99 {out[key]['p99_ms']} ms")
    g.close()
    out["gptcache_fill"] = "DataManager.import_data in chunks of 5,000 (put() one by one: ~6 ms each)"
    return out


def _stats(times: list[float], hits: int) -> dict:
    return {"p50_ms": round(float(np.percentile(times, 50)), 3), "p99_ms": round(float(np.percentile(times, 99)), 3),
            "mean_ms": round(float(np.mean(times)), 3), "hits": hits}
