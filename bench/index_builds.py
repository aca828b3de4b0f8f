"""Index builds at scale: ten new documents into a ~100k-chunk partition, from acknowledgement to searchable.

Writes bench/results/index_builds.md and .json. The partition is the retrieval benchmark's synthetic scale partition
(SciFact's chunks repeated with perturbed vectors and texts, retrieval_kit/scale.py), written with the product's
`build_version` and the default settings (token vectors as residuals), cached in bench/.cache/scale-*.
Then, on two copies of it, ten new SciFact abstracts (encoded by the product's encoder) become the next version:
once with `index.bm25_incremental` on (the default: the previous version's term statistics plus the new rows) and
once off (every text of the partition tokenized again, what every build did before). What is timed is what an
ingest waits for after the store's commit: encoding the new chunks, then `build_version` up to the new version
being current and open. Each build's time is split by a profile of the incremental one, so what is left shows.
"""
from __future__ import annotations

import argparse
import asyncio
import cProfile
import dataclasses
import json
import pstats
import shutil
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.machine import machine_info, progress_log, report_header, step_runner, write_results  # noqa: E402
from bench.retrieval_kit import scale  # noqa: E402
from bench.retrieval_kit.data import CACHE  # noqa: E402
from bench.token_vectors import SCIFACT, SOURCE, ingest_source, settings_for  # noqa: E402

from appliance.evaluate import EVAL_PARTITION, EVAL_TENANT, load_beir  # noqa: E402
from appliance.index import NewChunks, PartitionSnapshot, build_version, current_version  # noqa: E402
from appliance.text import BM25Tokenizer, chunk_text  # noqa: E402
from appliance.wiring import open_services  # noqa: E402

NEW_DOCS = 10


async def new_chunks(data, first_id: int) -> tuple[NewChunks, float]:
    """The last ten SciFact abstracts, chunked and encoded as an ingest does; returns them and the encode ms."""
    settings = settings_for(CACHE / "unused-index-builds")
    async with open_services(settings, warm_up=False, generation=False) as s:
        docs = data.corpus[-NEW_DOCS:]
        texts, meta = [], []
        for d in docs:
            for piece in chunk_text(d["text"], settings.chunking.max_words, settings.chunking.overlap_words,
                                    settings.chunking.max_chars_cjk, settings.chunking.overlap_chars_cjk,
                                    settings.chunking.max_chars):
                texts.append(piece)
                meta.append({"key": f"new-{d['_id']}", "title": d["title"], "source": "", "metadata": {}})
        batcher = s.library.encoders.for_language("en")
        started = time.perf_counter()
        encoded = await batcher.encode_many([f"{m['title']}. {t}" for m, t in zip(meta, texts)])
        encode_ms = (time.perf_counter() - started) * 1000
    ids = np.arange(first_id, first_id + len(texts), dtype=np.int64)
    return NewChunks(ids, np.zeros(len(ids), np.int32), texts, meta, encoded.dense, encoded.tokens), encode_ms


def timed_build(partition_dir: Path, added: NewChunks, incremental: bool, profile: bool) -> dict:
    params = dataclasses.replace(settings_for(CACHE / "unused").index, bm25_incremental=incremental)
    previous = PartitionSnapshot(current_version(partition_dir), params.expansion_search)
    profiler = cProfile.Profile() if profile else None
    started = time.perf_counter()
    if profiler:
        profiler.enable()
    snapshot = build_version(partition_dir, 1, previous.store_version + 1, previous.encoder, previous.dim, previous,
                             np.zeros(0, np.int64), added, params, BM25Tokenizer().many)
    if profiler:
        profiler.disable()
    build_ms = (time.perf_counter() - started) * 1000
    rows, _ = snapshot.bm25_search(BM25Tokenizer()(added.texts[0]), 5)
    found = int(added.chunk_ids[0]) in {int(snapshot.chunk_ids[r]) for r in rows}
    out = {"build_ms": round(build_ms, 1), "chunks_after": snapshot.size, "new_chunk_found_by_bm25": found}
    if profiler:
        out["profile"] = _top(profiler)
    return out


def _top(profiler: cProfile.Profile, n: int = 12) -> list[dict]:
    """The build's own functions by cumulative time: where the remaining seconds go."""
    stats = pstats.Stats(profiler)
    rows = [{"function": f"{Path(file).name}:{name}", "cumulative_s": round(cum, 2)}
            for (file, _, name), (_, _, _, cum, _) in stats.stats.items()
            if "appliance" in file or "usearch" in file or name in ("save", "restore", "fsync")]
    return sorted(rows, key=lambda r: -r["cumulative_s"])[:n]


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--chunks", type=int, default=100_000)
    parser.add_argument("--out", type=Path, default=Path(__file__).resolve().parent / "results" / "index_builds")
    args = parser.parse_args()
    started = time.perf_counter()
    log = progress_log(started)
    results = {"meta": machine_info(["rag-appliance", "numpy", "usearch", "bm25s"]) | {"quick": args.chunks < 100_000}}
    step = step_runner(results)
    data = load_beir(SCIFACT)
    await step("source", ingest_source(data, log))
    source = PartitionSnapshot(current_version(SOURCE / "indexes" / "p000001"))
    assert source.size and source.partition_id == 1, "the SciFact source partition"
    index = settings_for(CACHE / "unused").index

    async def build_partition() -> dict:
        partition_dir, meta = await asyncio.to_thread(scale.build, source, args.chunks, True, index, log)
        results["partition_dir"] = str(partition_dir)
        snap = PartitionSnapshot(current_version(partition_dir))
        return meta | {"chunks": snap.size, "token_codec": snap.token_codec, "disk_bytes": snap.disk_bytes()[0],
                       "token_vector_bytes": snap.disk_bytes()[1]}

    await step("partition", build_partition())
    added, encode_ms = await new_chunks(data, results["partition"]["chunks"] + 1)
    results["new"] = {"documents": NEW_DOCS, "chunks": len(added.chunk_ids), "encode_ms": round(encode_ms, 1)}

    async def builds() -> dict:
        out = {}
        # the profiled build is a third one: cProfile slows the Python parts, so it times nothing reported
        for label, incremental, profile in (("incremental BM25 (now)", True, False),
                                            ("full BM25 (before)", False, False), ("profiled", True, True)):
            copy = CACHE / "index-builds-copy"
            shutil.rmtree(copy, ignore_errors=True)
            shutil.copytree(results["partition_dir"], copy)
            out[label] = await asyncio.to_thread(timed_build, copy, added, incremental, profile)
            out[label]["ack_to_searchable_ms"] = round(encode_ms + out[label]["build_ms"], 1)
            log(f"  {label}: {json.dumps({k: v for k, v in out[label].items() if k != 'profile'})}")
            shutil.rmtree(copy, ignore_errors=True)
        return out

    await step("builds", builds())
    write_results(args.out, results, markdown, started, lambda r: {}, log)


def markdown(r: dict) -> str:
    p, new = r["partition"], r["new"]
    lines = report_header("Index builds: ten documents into a 100k-chunk partition", r, "bench-builds",
                          f"{p['chunks']} chunks")
    lines += ["", f"Partition: {p['chunks']} chunks ({p['token_codec']} token vectors), "
              f"{p['disk_bytes'] / 2**30:.2f} GiB on disk of which token vectors "
              f"{p['token_vector_bytes'] / 2**30:.2f} GiB; written in {p['build_s']} s in steps of "
              f"{scale.TOKEN_STEP} chunks (when first built). New: {new['documents']} SciFact abstracts -> "
              f"{new['chunks']} chunks, encoded in {new['encode_ms']} ms.", "",
              "| build | encode ms | build ms | ack to searchable ms | new chunk found by BM25 |",
              "|---|---|---|---|---|"]
    builds = {k: v for k, v in r["builds"].items() if k != "profiled"}
    for label, b in builds.items():
        lines.append(f"| {label} | {new['encode_ms']} | {b['build_ms']} | {b['ack_to_searchable_ms']} | "
                     f"{b['new_chunk_found_by_bm25']} |")
    now, before = builds["incremental BM25 (now)"], builds["full BM25 (before)"]
    lines += ["", f"Ack to searchable: {before['ack_to_searchable_ms'] / now['ack_to_searchable_ms']:.1f}x faster "
              "with incremental BM25.", "",
              "Where an incremental build's time goes (a third build under cProfile, which slows the Python parts; "
              "cumulative seconds):", "",
              "| function | cumulative s |", "|---|---|"]
    lines += [f"| `{row['function']}` | {row['cumulative_s']} |" for row in r["builds"]["profiled"]["profile"]]
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    asyncio.run(main())
