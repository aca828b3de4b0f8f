"""Languages benchmark: English and Chinese partitions on one box, each with its own encoder, against the same
data served alone and against the single-encoder box a user would otherwise run; the Chinese semantic cache
against GPTCache on AFQMC.

    .venv/bin/python bench/languages.py            # the full run (`just bench-languages`)
    .venv/bin/python bench/languages.py --quick    # 60 SciFact and 100 CMRC questions on slices: debugging

Writes bench/results/languages.md and .json (quick runs: bench/.cache/languages-quick.*). Steps, one after another:

1. box: one data folder, one tenant, SciFact ingested into partition `scifact` and CMRC into `cmrc`, both with
   `language = auto` (what each was detected as is reported) and the default settings. Every judged question is
   searched (k = 10, one at a time, query encoding included) over its own partition only ("alone": the same
   snapshot, as a box holding only that data serves it) and over the whole tenant ("together"), the two scopes
   interleaved question by question after an untimed pass over all questions (warm page cache); nDCG@10, p50/p99,
   and the share of questions whose first hit is in their own partition. CMRC also by BM25 alone, vectors alone,
   and hybrid at the English dense weight (0.5, the old setting).
2. one_encoder: the single-encoder boxes a user picks without this: `encoder.model = "minilm"` for everything (the
   old default) on CMRC, `encoder.model = "use"` on SciFact (no late interaction), each ingested in a folder of its
   own.
3. chinese_late: does late interaction pay on Chinese? The product's character late interaction (encode/chars.py)
   swept over `retrieve.late_weight_zh` on CMRC (languages_kit/charlate.py): chosen on the even questions, reported
   on the odd ones against hybrid without it.
4. afqmc: bench/serving_kit/cache_eval.run on AFQMC with USE vectors: GPTCache 0.1.44 swept on the same vectors,
   our thresholds chosen on the even pairs with the Chinese rules (numbers in both forms, negation, terms on one
   side only: `cache.semantic_max_term_difference_zh`), reported on the odd ones. Then the labelled pairs on their
   own (languages_kit/pairs.py): the product's check, the cosine alone, and a logistic regression over every
   signal the box has, each judged pair by pair on its label, so hits on other pairs' questions (paraphrases or
   not: the data does not say) do not count.

    .venv/bin/python bench/languages.py --skip-box --skip-one-encoder --skip-chinese-late \
        --out bench/results/languages_afqmc    # step 4 alone
"""
from __future__ import annotations

import argparse
import asyncio
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from appliance.config import load_settings  # noqa: E402  (onnxruntime before usearch: see MODELS.md)
from appliance.evaluate import BeirData, beir_documents, load_beir, ndcg_at  # noqa: E402
from appliance.retrieve import PartitionFilter  # noqa: E402
from appliance.timings import Stage  # noqa: E402
from appliance.wiring import open_services  # noqa: E402
from machine import REPO, machine_info, progress_log, report_header, step_runner, write_results  # noqa: E402
from languages_kit.report import judge, markdown  # noqa: E402

DATA = REPO.parent / "shared" / "data"
CACHE = REPO / "bench" / ".cache"
TENANT = "box"
DATASETS = {"scifact": DATA / "beir_scifact", "cmrc": DATA / "cmrc2018_retrieval_zh"}
DENSE_WEIGHTS_ZH = (0.02, 0.05, 0.1, 0.2, 0.5)
TERM_DIFFERENCES = (1.0, 0.5, 0.4, 0.3, 0.2, 0.1)  # cache.semantic_max_term_difference_zh; 1 = off
PACKAGES = ["rag-appliance", "onnxruntime", "usearch", "bm25s", "numpy", "gptcache", "faiss-cpu"]


def parse_args(argv=None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--quick", action="store_true")
    p.add_argument("--skip-box", action="store_true", help="skip step 1 (both ingests, every question searched)")
    p.add_argument("--skip-one-encoder", action="store_true", help="skip step 2 (two more ingests)")
    p.add_argument("--skip-afqmc", action="store_true")
    p.add_argument("--skip-chinese-late", action="store_true")
    p.add_argument("--out", type=Path, default=None)
    return p.parse_args(argv)


def settings_for(folder: Path, **env: str):
    base = {"APPLIANCE_DATA_DIR": str(folder), "APPLIANCE_MODELS_DIR": str(REPO / "models"),
            "APPLIANCE_DEMO_CORPUS": "false", "APPLIANCE_GENERATE_ENABLED": "false", "APPLIANCE_LOG_LEVEL": "warning",
            # no embedding cache: each scope's questions are encoded afresh, as a first question is
            "APPLIANCE_CACHE_ENABLED": "false"}
    return load_settings(env=base | {f"APPLIANCE_{k.upper()}": v for k, v in env.items()})


def load_data(quick: bool) -> dict[str, BeirData]:
    out = {}
    for name, folder in DATASETS.items():
        data = load_beir(folder)
        if quick:
            queries = dict(list(data.queries.items())[:60 if name == "scifact" else 100])
            relevant = {d for q in queries for d in data.qrels[q]}
            corpus = [d for d in data.corpus if str(d["_id"]) in relevant]
            corpus += [d for d in data.corpus if str(d["_id"]) not in relevant][:300]
            data = BeirData(corpus, queries, {q: data.qrels[q] for q in queries})
        out[name] = data
    return out


async def ensure_ingested(services, partition: str, data: BeirData, log) -> dict:
    """Ingest the corpus into the partition unless a previous run left chunks there (delete bench/.cache/languages
    after changing the data)."""
    listed = {p.name: p for p in services.library.partitions(TENANT)}
    if partition in listed and listed[partition].chunks:
        log(f"{partition}: reusing the ingested partition ({listed[partition].chunks} chunks)")
        return {"ingest_s": None, "reused": True}
    started = time.perf_counter()
    docs = beir_documents(data.corpus)
    for start in range(0, len(docs), 256):
        await services.library.ingest(TENANT, partition, docs[start:start + 256])
        log(f"{partition}: {min(start + 256, len(docs))}/{len(docs)} documents")
    return {"ingest_s": round(time.perf_counter() - started, 1), "reused": False}


async def score(services, data: BeirData, own: str, scopes: dict[str, PartitionFilter],
                mode: str = "hybrid", late: bool | None = None) -> dict[str, dict]:
    """Every judged question searched in each scope, the scopes interleaved question by question (their order
    swapped every question), so a busy moment on the box costs all scopes alike."""
    runs = {scope: {"ndcg": [], "latency": [], "own_first": [], "encode_ms": [], "encoders": set()} for scope in scopes}
    for n, (qid, text) in enumerate(data.queries.items()):
        for scope in (list(scopes) if n % 2 == 0 else list(reversed(scopes))):
            run = runs[scope]
            started = time.perf_counter()
            result = await services.retriever.search(text, scopes[scope], 10, late_interaction=late, mode=mode)
            run["latency"].append((time.perf_counter() - started) * 1000)
            run["encode_ms"].append(result.timings.get(Stage.ENCODE) or 0.0)
            run["ndcg"].append(ndcg_at(list(dict.fromkeys(h.chunk.doc_key for h in result.hits)), data.qrels[qid]))
            run["own_first"].append(bool(result.hits) and result.hits[0].partition == own)
            run["encoders"].update(result.encoders)
    return {scope: {"ndcg@10": _mean(r["ndcg"]), "p50_ms": _pct(r["latency"], 50), "p99_ms": _pct(r["latency"], 99),
                    "own_first": _mean(r["own_first"]), "encode_p50_ms": _pct(r["encode_ms"], 50),
                    "queries": len(r["latency"]), "encoders": sorted(r["encoders"])} for scope, r in runs.items()}


async def bench_box(data: dict[str, BeirData], folder: Path, log) -> dict:
    out: dict = {"partitions": {}, "alone": {}, "together": {}, "cmrc_modes": {}}
    async with open_services(settings_for(folder), warm_up=False, generation=False) as services:
        for name in DATASETS:
            out["partitions"][name] = await ensure_ingested(services, name, data[name], log)
        for info in services.library.partitions(TENANT):
            out["partitions"][info.name].update(language=info.language, encoder=info.encoder, chunks=info.chunks)
        # an untimed pass over every question first: the token shards are memory-mapped, and the first questions
        # of a cold page cache (up to 150 ms each) would otherwise be the p99 of whichever scope met them
        for name in DATASETS:
            for text in data[name].queries.values():
                await services.retriever.search(text, PartitionFilter(TENANT, (name,)), 10)
        for name in DATASETS:
            scored = await score(services, data[name], name, {"alone": PartitionFilter(TENANT, (name,)),
                                                               "together": PartitionFilter(TENANT)})
            for scope, figures in scored.items():
                out[scope][name] = figures
                log(f"{name} {scope}: {figures}")
        alone = {"alone": PartitionFilter(TENANT, ("cmrc",))}
        for mode in ("bm25", "dense"):  # each list alone, without any late interaction
            out["cmrc_modes"][mode] = (await score(services, data["cmrc"], "cmrc", alone, mode, False))["alone"]
            log(f"cmrc {mode}: {out['cmrc_modes'][mode]}")
    for weight in DENSE_WEIGHTS_ZH:  # the weight of the vector list for Chinese partitions (0.5: English's)
        async with open_services(settings_for(folder, retrieve_dense_weight_zh=str(weight)), warm_up=False,
                                 generation=False) as services:
            out["cmrc_modes"][f"hybrid, dense weight {weight}"] = (await score(
                services, data["cmrc"], "cmrc", {"alone": PartitionFilter(TENANT, ("cmrc",))}))["alone"]
    out["dense_weight_zh"] = settings_for(folder).retrieve.dense_weight_zh
    return out


async def bench_one_encoder(data: dict[str, BeirData], folder: Path, log) -> dict:
    out = {}
    for encoder, name in (("minilm", "cmrc"), ("use", "scifact")):
        async with open_services(settings_for(folder / encoder, encoder_model=encoder), warm_up=False,
                                 generation=False) as services:
            ingest = await ensure_ingested(services, name, data[name], log)
            out[f"{name} with {encoder} for everything"] = ingest | (await score(
                services, data[name], name, {"alone": PartitionFilter(TENANT, (name,))}))["alone"]
            log(f"{name} / {encoder}: {out[f'{name} with {encoder} for everything']}")
    return out


async def bench_chinese_late(data: dict[str, BeirData], folder: Path, log) -> dict:
    from languages_kit import charlate

    return await charlate.run(lambda **env: settings_for(folder, **env), data["cmrc"], TENANT, "cmrc", log)


async def bench_afqmc(log) -> dict:
    from languages_kit import pairs as labelled_pairs
    from serving_kit import cache_eval
    from serving_kit.vectors import load_dataset

    from dataclasses import replace

    from appliance.cache.evaluate import evaluate_pairs
    from appliance.cache.semantic import SemanticParams
    from appliance.config import CacheSettings

    pairs, vectors, encoder = load_dataset("afqmc_zh", REPO / "models", log)
    out = cache_eval.run("afqmc_zh", pairs, vectors, encoder, log)
    # the Chinese term check's own setting, swept at the chosen cosine on the even pairs, then the odd
    base = SemanticParams(out["chosen"]["threshold"], 0.0, 200_000, 1e9, threshold_zh=out["chosen"]["threshold"])
    out["term_sweep"] = {split: [evaluate_pairs(subset, vectors.encode, replace(base, max_term_difference_zh=d))
                                 | {"max_term_difference_zh": d} for d in TERM_DIFFERENCES]
                         for split, subset in (("dev", pairs[0::2]), ("held_out", pairs[1::2]))}
    out["pairs_alone"] = labelled_pairs.run(pairs, vectors, out["chosen"]["threshold"],
                                            CacheSettings().semantic_max_term_difference_zh)
    return out


def _mean(values) -> float:
    return round(sum(values) / len(values), 4) if values else 0.0


def _pct(values, q: float) -> float:
    import numpy as np

    return round(float(np.percentile(values, q)), 2) if values else 0.0


async def main(argv=None) -> int:
    args = parse_args(argv)
    started = time.perf_counter()
    log = progress_log(started)
    results: dict = {"meta": machine_info(PACKAGES) | {"quick": args.quick}}
    step = step_runner(results)
    data = load_data(args.quick)
    root = CACHE / ("languages-quick" if args.quick else "languages")
    if not args.skip_box:
        await step("box", bench_box(data, root / "box", log))
    if not args.skip_one_encoder:
        await step("one_encoder", bench_one_encoder(data, root / "one-encoder", log))
    if not args.skip_chinese_late:
        await step("chinese_late", bench_chinese_late(data, root / "box", log))
    if not args.skip_afqmc:
        await step("afqmc", bench_afqmc(log))
    out = args.out or (CACHE / "languages-quick" if args.quick else REPO / "bench" / "results" / "languages")
    write_results(out, results, lambda r: markdown(r, report_header), started, judge, log)
    return 0


if __name__ == "__main__":
    sys.exit(asyncio.run(main()))
