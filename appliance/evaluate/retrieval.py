"""Retrieval evaluation on a BEIR-format folder: nDCG@10, recall@100, MRR@10 and search latency.

Results are chunks; a document's rank is the rank of its best chunk, as a user reading the list would see it.
nDCG@10, MRR@10 and latency come from a k=10 search, the page a client asks for, so they measure the fusion the
product really does (each list over-fetches 10 x k); recall@100 comes from a second search of RECALL_CHUNKS.
"""
from __future__ import annotations

import csv
import json
import math
import tempfile
import time
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Iterator

import numpy as np

from ..config import Settings
from ..library import DocumentInput, FileInput
from ..retrieve import PartitionFilter, Retriever
from ..wiring import open_services

EVAL_TENANT, EVAL_PARTITION = "eval", "corpus"
RECALL_CHUNKS = 150  # chunks fetched for recall@100: documents have ~1.6 chunks each, ranked by their best


@dataclass(slots=True)
class BeirData:
    corpus: list[dict]
    queries: dict[str, str]
    qrels: dict[str, dict[str, int]]


def load_beir(folder: Path, split: str = "test") -> BeirData:
    folder = Path(folder)
    corpus = list(read_jsonl(folder / "corpus.jsonl"))
    queries = {str(q["_id"]): q["text"] for q in read_jsonl(folder / "queries.jsonl")}
    qrels = load_qrels(folder, split)
    return BeirData(corpus, {q: t for q, t in queries.items() if q in qrels}, qrels)


def load_qrels(folder: Path, split: str = "test") -> dict[str, dict[str, int]]:
    """query id -> {document id: grade}, the positive judgments of `qrels/<split>.tsv` (a header line or none)."""
    qrels: dict[str, dict[str, int]] = {}
    with open(Path(folder) / "qrels" / f"{split}.tsv", encoding="utf-8") as f:
        reader = csv.reader(f, delimiter="\t")
        header = next(reader)
        if header and header[0].strip().isdigit():  # no header line after all
            reader = iter([header, *reader])
        for row in reader:
            if len(row) >= 3 and int(row[2]) > 0:
                qrels.setdefault(row[0], {})[row[1]] = int(row[2])
    return qrels


def read_jsonl(path: Path) -> Iterator[dict]:
    with open(path, encoding="utf-8") as f:
        for line in f:
            if line.strip():
                yield json.loads(line)


def beir_documents(corpus: list[dict]) -> list[DocumentInput]:
    return [DocumentInput(id=str(d["_id"]), title=d.get("title") or "", text=d.get("text") or d.get("title") or "",
                          metadata=d.get("metadata") or None) for d in corpus]


def ndcg_at(ranked: list[str], relevant: dict[str, int], k: int = 10) -> float:
    dcg = sum((2 ** relevant.get(doc, 0) - 1) / math.log2(i + 2) for i, doc in enumerate(ranked[:k]))
    ideal = sorted(relevant.values(), reverse=True)[:k]
    idcg = sum((2 ** g - 1) / math.log2(i + 2) for i, g in enumerate(ideal))
    return dcg / idcg if idcg else 0.0


def recall_at(ranked: list[str], relevant: dict[str, int], k: int = 100) -> float:
    return len(set(ranked[:k]) & set(relevant)) / len(relevant) if relevant else 0.0


def mrr_at(ranked: list[str], relevant: dict[str, int], k: int = 10) -> float:
    for i, doc in enumerate(ranked[:k]):
        if doc in relevant:
            return 1.0 / (i + 1)
    return 0.0


async def score_queries(retriever: Retriever, data: BeirData, mode: str = "hybrid",
                        late_interaction: bool | None = None, tenant: str = EVAL_TENANT) -> dict[str, float]:
    """Run every judged query through the in-process search path and average the metrics."""
    ndcg, recall, mrr, latency = [], [], [], []
    where = PartitionFilter(tenant)
    for qid, text in data.queries.items():
        relevant = data.qrels[qid]
        started = time.perf_counter()
        page = await retriever.search(text, where, k=10, late_interaction=late_interaction, mode=mode)
        latency.append((time.perf_counter() - started) * 1000)
        ranked = list(dict.fromkeys(h.chunk.doc_key for h in page.hits))
        ndcg.append(ndcg_at(ranked, relevant))
        mrr.append(mrr_at(ranked, relevant))
        deep = await retriever.search(text, where, k=RECALL_CHUNKS, late_interaction=late_interaction, mode=mode)
        recall.append(recall_at(list(dict.fromkeys(h.chunk.doc_key for h in deep.hits)), relevant))
    return {
        "ndcg@10": round(float(np.mean(ndcg)), 4), "recall@100": round(float(np.mean(recall)), 4),
        "mrr@10": round(float(np.mean(mrr)), 4), "p50_ms": round(float(np.percentile(latency, 50)), 2),
        "p99_ms": round(float(np.percentile(latency, 99)), 2), "queries": len(latency),
    }


async def evaluate_retrieval(settings: Settings, folder: Path, split: str = "test", mode: str = "hybrid",
                             late_interaction: bool | None = None, progress=None,
                             dense_weights: tuple[float, ...] = ()) -> dict:
    """Ingest the folder's corpus into a fresh temporary store, then score its judged queries. A folder with
    `files/` is ingested through the parsers (a file's stem is its document id; `corpus.jsonl` is then only the
    reference text); the report then says how many files failed to parse. `dense_weights`: also score the queries
    with the partition given each of these weights of its own (what to set a partition's to: PATCH
    /v1/partitions/{name}), under `by_dense_weight`."""
    data = load_beir(folder, split)
    files = sorted(p for p in (Path(folder) / "files").glob("*") if p.is_file())
    with tempfile.TemporaryDirectory(prefix="appliance-eval-") as tmp:
        fresh = replace(settings, data_dir=Path(tmp), demo_corpus=False)
        async with open_services(fresh, warm_up=False, generation=False) as services:
            failed = await (_ingest_files(services, files, progress) if files
                            else _ingest_corpus(services, data, progress))
            await services.library.ingest(EVAL_TENANT, EVAL_PARTITION, [], wait=True)
            report = await score_queries(services.retriever, data, mode, late_interaction)
            snapshot = services.library.snapshot(EVAL_TENANT, EVAL_PARTITION)
            index_bytes, token_bytes = snapshot.disk_bytes() if snapshot is not None else (0, 0)
            report.update(chunks=snapshot.size if snapshot is not None else 0, index_bytes=index_bytes,
                          token_vector_bytes=token_bytes,
                          token_codec=snapshot.token_codec if snapshot is not None else "")
            if files:
                report.update(files=len(files), files_failed=failed)
            if dense_weights:
                report["by_dense_weight"] = await _by_dense_weight(services, data, mode, late_interaction,
                                                                   dense_weights)
            return report


async def _by_dense_weight(services, data: BeirData, mode: str, late_interaction: bool | None,
                           weights: tuple[float, ...]) -> dict[str, dict[str, float]]:
    out = {}
    for weight in weights:
        await services.library.set_dense_weight(EVAL_TENANT, EVAL_PARTITION, weight)
        scored = await score_queries(services.retriever, data, mode, late_interaction)
        out[f"{weight:g}"] = {key: scored[key] for key in ("ndcg@10", "recall@100", "mrr@10")}
    await services.library.set_dense_weight(EVAL_TENANT, EVAL_PARTITION, None)
    return out


async def _ingest_corpus(services, data: BeirData, progress) -> int:
    docs = beir_documents(data.corpus)
    for start in range(0, len(docs), 256):
        await services.library.ingest(EVAL_TENANT, EVAL_PARTITION, docs[start:start + 256], wait=False)
        if progress:
            progress(min(start + 256, len(docs)), len(docs))
    return 0


async def _ingest_files(services, files: list[Path], progress, batch: int = 32) -> int:
    failed = 0
    for start in range(0, len(files), batch):
        part = [FileInput(p.name, p.read_bytes(), id=p.stem) for p in files[start:start + batch]]
        result = await services.files.ingest(EVAL_TENANT, EVAL_PARTITION, part, wait=False)
        failed += sum(f.error is not None for f in result.files)
        if progress:
            progress(min(start + batch, len(files)), len(files))
    return failed
