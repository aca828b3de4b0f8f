"""Datasets, the cached appliance data folders, and the corpus (chunk texts + vectors) handed to the peers.

Encoding is the slow part (~16 passages/s with MiniLM on 2 cores), so each dataset is ingested once into
bench/.cache/<name>/ and re-opened on later runs: a data folder that already holds the index opens in seconds.
The peers are then fed the vectors and chunk texts read back from that index, so every system searches the same
embeddings of the same chunks.
"""
from __future__ import annotations

import hashlib
import json
import random
import shutil
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from appliance.config import Settings, load_settings
from appliance.evaluate import EVAL_PARTITION, EVAL_TENANT, BeirData, beir_documents, load_beir

from .kit import BenchApp

REPO = Path(__file__).resolve().parents[2]
DATA = REPO.parent / "shared" / "data"
CACHE = REPO / "bench" / ".cache"


@dataclass(frozen=True)
class DatasetSpec:
    name: str
    folder: Path
    encoder: str  # "minilm" (English, token vectors) or "use" (Chinese-capable, no token vectors)
    language: str


DATASETS = {
    "scifact": DatasetSpec("scifact", DATA / "beir_scifact", "minilm", "en"),
    "cmrc": DatasetSpec("cmrc", DATA / "cmrc2018_retrieval_zh", "use", "zh"),
}


@dataclass
class Corpus:
    """The indexed chunks, row-aligned: what every peer indexes."""
    doc_keys: list[str]
    titles: list[str]
    texts: list[str]
    dense: np.ndarray  # (n, dim) float32, from the appliance's f16 index

    def bm25_text(self, row: int) -> str:
        return f"{self.titles[row]}\n{self.texts[row]}"  # what the appliance's bm25s index sees (index/builder.py)


def load_dataset(spec: DatasetSpec, queries: int | None, docs: int | None, seed: int = 0) -> BeirData:
    """The whole set, or (quick runs) the first `queries` judged queries, their relevant documents and random
    other documents up to `docs` in all."""
    data = load_beir(spec.folder)
    if queries is None:
        return data
    chosen = dict(list(data.queries.items())[:queries])
    relevant = {d for q in chosen for d in data.qrels[q]}
    corpus = [d for d in data.corpus if str(d["_id"]) in relevant]
    others = [d for d in data.corpus if str(d["_id"]) not in relevant]
    random.Random(seed).shuffle(others)
    corpus += others[:max(0, (docs or 0) - len(corpus))]
    return BeirData(corpus, chosen, {q: data.qrels[q] for q in chosen})


def make_settings(data_dir: Path, encoder: str) -> Settings:
    return load_settings(env={
        "APPLIANCE_DATA_DIR": str(data_dir), "APPLIANCE_MODELS_DIR": str(REPO / "models"),
        "APPLIANCE_DEMO_CORPUS": "false", "APPLIANCE_ENCODER_MODEL": encoder, "APPLIANCE_LOG_LEVEL": "warning",
        # Off: the embedding cache would hand a repeated query its vectors, and every timed query is repeated
        # (quality pass, then latency), so "query encoding included" would time a cache hit instead.
        "APPLIANCE_CACHE_ENABLED": "false",
    })


# The code that decides what an index holds (chunking, BM25 terms, vectors, on-disk format): when it changes, a
# cached index no longer shows what the current code would build, so the cache is rebuilt.
INDEX_CODE = ["appliance/index", "appliance/text", "appliance/encode", "appliance/library/ingest.py"]


def code_hash(parts: list[str] = INDEX_CODE) -> str:
    digest = hashlib.sha256()
    for part in parts:
        path = REPO / part
        for file in sorted(path.rglob("*.py")) if path.is_dir() else [path]:
            digest.update(file.relative_to(REPO).as_posix().encode())
            digest.update(file.read_bytes())
    return digest.hexdigest()[:16]


def _fingerprint(spec: DatasetSpec, data: BeirData, settings: Settings) -> dict:
    ids = hashlib.sha256("\n".join(str(d["_id"]) for d in data.corpus).encode()).hexdigest()[:16]
    return {"dataset": spec.name, "encoder": spec.encoder, "docs": len(data.corpus), "doc_ids": ids,
            "chunking": repr(settings.chunking), "index": repr(settings.index), "code": code_hash()}


async def open_appliance(spec: DatasetSpec, data: BeirData, tag: str, log=print) -> tuple[BenchApp, Path, dict]:
    """Start an appliance over the cached data folder, ingesting the corpus first if the cache is missing or stale.
    Returns the started appliance, its data folder and ingest facts (time, chunks, cached or not)."""
    folder = CACHE / f"{spec.name}-{tag}"
    settings = make_settings(folder, spec.encoder)
    meta_path = folder / "bench-meta.json"
    wanted = _fingerprint(spec, data, settings)
    meta = json.loads(meta_path.read_text()) if meta_path.exists() else {}
    if meta.get("fingerprint") != wanted and folder.exists():
        changed = sorted(k for k in wanted if meta.get("fingerprint", {}).get(k) != wanted[k])
        log(f"  {folder.name}: cache stale ({', '.join(changed)} changed): re-ingesting")
        shutil.rmtree(folder)
        meta = {}
    cached = bool(meta)
    app = await BenchApp.open(settings)
    if not cached:
        meta = {"fingerprint": wanted, **await _ingest(app, data, log)}
        meta_path.write_text(json.dumps(meta, indent=1))
    else:
        log(f"  {folder.name}: reusing cached index ({meta['chunks']} chunks, ingest took {meta['ingest_s']} s)")
    return app, folder, {k: v for k, v in meta.items() if k != "fingerprint"} | {"cached": cached}


async def _ingest(app: BenchApp, data: BeirData, log) -> dict:
    docs = beir_documents(data.corpus)
    log(f"  ingesting {len(docs)} documents (encoding is the slow part)")
    started = time.perf_counter()
    # Not waiting per batch lets the indexer coalesce the batches into a few large builds.
    for start in range(0, len(docs), 256):
        await app.services.library.ingest(EVAL_TENANT, EVAL_PARTITION, docs[start:start + 256], wait=False)
    await app.services.library.ingest(EVAL_TENANT, EVAL_PARTITION, [], wait=True)
    seconds = round(time.perf_counter() - started, 1)
    snapshot = eval_snapshot(app)
    log(f"  ingested {len(docs)} documents -> {snapshot.size} chunks in {seconds} s")
    return {"ingest_s": seconds, "chunks": snapshot.size, "docs": len(docs)}


def eval_snapshot(app: BenchApp):
    snapshot = app.services.library.snapshot(EVAL_TENANT, EVAL_PARTITION)
    if snapshot is None:
        raise LookupError("no indexed eval partition in this data folder")
    return snapshot


def read_corpus(app: BenchApp) -> Corpus:
    """Copy the chunk texts, document keys and vectors out of the index (so they outlive the appliance)."""
    snap = eval_snapshot(app)
    infos = [snap.chunk(row) for row in range(snap.size)]
    return Corpus(doc_keys=[c.doc_key for c in infos], titles=[c.title for c in infos],
                  texts=[c.text for c in infos], dense=np.asarray(snap.dense, dtype=np.float32))


def all_queries(spec: DatasetSpec, judged: dict[str, str], quick: bool) -> list[str]:
    """Distinct query texts for the speed runs: every query in the set (judged or not), or the judged ones (quick)."""
    if quick:
        return list(judged.values())
    with open(spec.folder / "queries.jsonl", encoding="utf-8") as f:
        texts = [json.loads(line)["text"] for line in f if line.strip()]
    return list(dict.fromkeys(texts))
