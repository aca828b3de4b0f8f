"""Token vectors for late interaction: how they are stored, what that costs on disk, what it does to ranking, and
how the first queries after a boot fare.

Writes bench/results/token_vectors.md and .json. Steps, one after another on the same box:
1. SciFact ingested once with int8 token vectors (the store before the residual codec), cached in
   bench/.cache/tokens-scifact-int8/ (~6 min on 2 cores the first time).
2. Codecs on the same vectors and the same candidates (tokens_kit/codecs.py): int8, ours (residuals against
   k-means centroids) at a few sizes, and faiss's product quantizer, which a user compressing vectors would pick.
3. The product path: a copy of the int8 partition re-coded by `Library.reindex(tokens_only=True)` (what
   `appliance reindex --tokens` runs) and SciFact scored through the retriever, both codecs.
4. Cold and warm: the partition's files evicted from the page cache, then the first 100 queries after the boot,
   with the boot's prefetch (`index.warm_max_mib`) off and on, against the same queries once warm (caches off, so
   the second pass encodes its queries again).
"""
from __future__ import annotations

import argparse
import asyncio
import json
import shutil
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.machine import machine_info, progress_log, step_runner, write_results  # noqa: E402
from bench.retrieval_kit.data import CACHE, code_hash  # noqa: E402
from bench.retrieval_kit.measure import evict  # noqa: E402
from bench.tokens_kit.codecs import (Candidates, faiss_pq_tokens, first_rows_sample, int8_tokens,  # noqa: E402
                                     rank, residual_tokens, training_sample)
from bench.tokens_kit.report import markdown  # noqa: E402

from appliance.config import load_settings  # noqa: E402
from appliance.evaluate import (EVAL_PARTITION, EVAL_TENANT, beir_documents, load_beir,  # noqa: E402
                                score_queries)
from appliance.retrieve import PartitionFilter  # noqa: E402
from appliance.wiring import open_services  # noqa: E402

REPO = Path(__file__).resolve().parent.parent
SCIFACT = REPO.parent / "shared" / "data" / "beir_scifact"
SOURCE = CACHE / "tokens-scifact-int8"
COLD_QUERIES = 100


def settings_for(folder: Path, cache: bool = True, **index: str):
    """`cache`: the caches on (the default); off, a repeated query is encoded again (the embedding cache would
    otherwise serve its vectors)."""
    env = {"APPLIANCE_DATA_DIR": str(folder), "APPLIANCE_MODELS_DIR": str(REPO / "models"),
           "APPLIANCE_DEMO_CORPUS": "false", "APPLIANCE_ENCODER_MODEL": "minilm", "APPLIANCE_LOG_LEVEL": "warning",
           "APPLIANCE_GENERATE_ENABLED": "false", "APPLIANCE_CACHE_ENABLED": str(cache).lower()}
    return load_settings(env=env | {f"APPLIANCE_INDEX_{k.upper()}": v for k, v in index.items()})


async def ingest_source(data, log) -> dict:
    meta_path = SOURCE / "bench-meta.json"
    wanted = {"code": code_hash(), "docs": len(data.corpus)}
    if meta_path.exists() and json.loads(meta_path.read_text()).get("fingerprint") == wanted:
        meta = json.loads(meta_path.read_text())
        log(f"reusing {SOURCE.name} (ingested in {meta['ingest_s']} s)")
        return meta
    shutil.rmtree(SOURCE, ignore_errors=True)
    log(f"ingesting {len(data.corpus)} SciFact documents with int8 token vectors")
    started = time.perf_counter()
    async with open_services(settings_for(SOURCE, token_codec="int8"), warm_up=False, generation=False) as s:
        docs = beir_documents(data.corpus)
        for start in range(0, len(docs), 256):
            await s.library.ingest(EVAL_TENANT, EVAL_PARTITION, docs[start:start + 256], wait=False)
        await s.library.ingest(EVAL_TENANT, EVAL_PARTITION, [], wait=True)
        chunks = s.library.snapshot(EVAL_TENANT, EVAL_PARTITION).size
    meta = {"fingerprint": wanted, "ingest_s": round(time.perf_counter() - started, 1), "chunks": chunks}
    meta_path.write_text(json.dumps(meta))
    return meta


async def compare_codecs(data, log) -> list[dict]:
    async with open_services(settings_for(SOURCE, token_codec="int8"), warm_up=False, generation=False) as s:
        snapshot = s.library.snapshot(EVAL_TENANT, EVAL_PARTITION)
        queries = []
        for qid, text in data.queries.items():
            query = await s.retriever.encode(text)
            page = await s.retriever.search(text, PartitionFilter(EVAL_TENANT), 30, late_interaction=False)
            rows = np.searchsorted(snapshot.chunk_ids, [h.chunk.chunk_id for h in page.hits])
            queries.append(Candidates(query.tokens.astype(np.float32), rows, data.qrels[qid]))
        sample = training_sample(snapshot, s.settings.index.codebook_sample)
        out = []
        makers = [lambda: int8_tokens(snapshot)]
        makers += [lambda c=c, b=b: residual_tokens(snapshot, sample, c, b) for c, b in
                   ((1024, 1), (4096, 1), (1024, 2))]
        for first_tokens in (50_000, s.settings.index.codebook_min_tokens):  # a trickle-filled partition's codebook
            first = first_rows_sample(snapshot, first_tokens)
            makers.append(lambda first=first, n=first_tokens: residual_tokens(
                snapshot, first, 1024, 1, f", trained on the partition's first {n:,} tokens only"))
        makers += [lambda m=m: faiss_pq_tokens(snapshot, sample, m) for m in (48, 96)]
        for make in makers:
            coded = await asyncio.to_thread(make)
            out.append(await asyncio.to_thread(rank, coded, snapshot, queries))
            log(f"  {out[-1]}")
        return out


async def product_path(data, log) -> dict:
    """int8 as stored, then a copy re-coded by the product's reindex path; both scored by the retriever."""
    results = {}
    async with open_services(settings_for(SOURCE, token_codec="int8"), warm_up=False, generation=False) as s:
        results["int8"] = await _scored(s, data)
    copy = CACHE / "tokens-scifact-residual"
    shutil.rmtree(copy, ignore_errors=True)
    shutil.copytree(SOURCE, copy)
    async with open_services(settings_for(copy), warm_up=False, generation=False) as s:
        started = time.perf_counter()
        await s.library.reindex(tokens_only=True)
        recode_s = round(time.perf_counter() - started, 1)
        results["residual"] = await _scored(s, data) | {"recode_s": recode_s}
    log(f"  {results}")
    return results


async def _scored(services, data) -> dict:
    snapshot = services.library.snapshot(EVAL_TENANT, EVAL_PARTITION)
    total, tokens = snapshot.disk_bytes()
    report = await score_queries(services.retriever, data, "hybrid", True)
    return report | {"codec": snapshot.token_codec, "index_bytes": total, "token_vector_bytes": tokens,
                     "chunks": snapshot.size, "tokens": snapshot.token_count}


async def cold_and_warm(data, log) -> dict:
    texts = list(data.queries.values())[:COLD_QUERIES]
    out = {}
    for label, folder, codec in (("int8", SOURCE, "int8"), ("residual", CACHE / "tokens-scifact-residual",
                                                             "residual")):
        for prefetch in (False, True):
            evict(folder / "indexes")
            index = {"token_codec": codec} | ({} if prefetch else {"warm_max_mib": "0"})
            async with open_services(settings_for(folder, cache=False, **index), warm_up=True,
                                     generation=False) as s:
                first = [await _timed(s, t) for t in texts]
                again = [await _timed(s, t) for t in texts]
                warm_ms = s.boot.warm_up_ms
            key = f"{label}, prefetch {'on' if prefetch else 'off'}"
            out[key] = {"first": _stats(first), "warm": _stats(again), "warm_up_ms": warm_ms}
            log(f"  {key}: {out[key]}")
    return out


async def _timed(services, text: str) -> tuple[float, float]:
    page = await services.retriever.search(text, PartitionFilter(EVAL_TENANT), 10, late_interaction=True)
    times = page.timings.as_dict()
    return float(times.get("late_interaction", 0.0)), float(times.get("total", 0.0))


def _stats(samples: list[tuple[float, float]]) -> dict:
    late, total = np.asarray(samples).T
    return {"late_p50_ms": round(float(np.percentile(late, 50)), 2),
            "late_p99_ms": round(float(np.percentile(late, 99)), 2),
            "total_p50_ms": round(float(np.percentile(total, 50)), 2),
            "total_p99_ms": round(float(np.percentile(total, 99)), 2)}


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=REPO / "bench" / "results" / "token_vectors")
    args = parser.parse_args()
    started = time.perf_counter()
    log = progress_log(started)
    results = {"meta": machine_info(["rag-appliance", "numpy", "onnxruntime", "faiss-cpu", "usearch", "bm25s"])}
    results["meta"]["quick"] = False
    step = step_runner(results)
    data = load_beir(SCIFACT)
    await step("source", ingest_source(data, log))
    await step("codecs", compare_codecs(data, log))
    await step("product", product_path(data, log))
    await step("cold", cold_and_warm(data, log))
    write_results(args.out, results, markdown, started, lambda r: {}, log)


if __name__ == "__main__":
    asyncio.run(main())
