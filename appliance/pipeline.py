"""Wires the stages: store, encoder (micro-batched), partition indexes, hybrid retrieval, engines and router.

`Appliance` is what the HTTP layer and the CLI talk to; it owns every long-lived part and the order they start
in. Request path for search: encode the query -> pick partitions -> BM25 and HNSW in parallel -> RRF -> late
interaction -> results with per-stage timings. Answers add: route -> prompt -> stream from an engine
(`answer.py`).
"""
from __future__ import annotations

import asyncio
import fcntl
import logging
import os
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

import threadpoolctl

from .answer import Answerer, AskRequest
from .cache import EmbeddingCache, ExactCache, SemanticCache, SemanticParams, SingleFlight
from .cached_answers import CachedAnswerer
from .config import Settings
from .encode import MicroBatcher, load_encoder
from .generate import EnginePool, Router, warm_up_prompts
from .ingest import DocumentInput, PartitionIndexer, prepare_documents
from .models import model_path
from .retrieve import Hit, HybridSearcher, PartitionFilter, Target, Timings, select_partitions
from .store import DocumentStatus, Store
from .text import BM25Tokenizer, markdown_title

log = logging.getLogger("appliance")

SAMPLES = Path(__file__).parent / "samples"
DEMO_TENANT, DEMO_PARTITION = "default", "demo"


class DataDirBusy(RuntimeError):
    """Another appliance process holds this data folder."""


class KindConflict(ValueError):
    """An ingest named a kind other than the one the existing partition has."""


@dataclass(slots=True)
class SearchResult:
    hits: list[Hit]
    partitions: list[str]
    timings: dict[str, float]


@dataclass(slots=True)
class IngestResult:
    tenant: str
    partition: str
    version: int
    indexed_version: int
    documents: list[DocumentStatus] = field(default_factory=list)
    index_error: str | None = None  # the documents are stored; the index catches up on the next write or boot


class Appliance:
    def __init__(self, settings: Settings):
        self.settings = settings
        self.ready = False
        self.boot_ms: float | None = None
        self._lock_file = None
        self.store: Store | None = None
        self.batcher: MicroBatcher | None = None
        self.tokenizer = BM25Tokenizer()
        self.indexers: dict[int, PartitionIndexer] = {}
        self._executor = ThreadPoolExecutor(settings.retrieve.search_threads, thread_name_prefix="search")
        self.searcher = HybridSearcher(settings.retrieve, self._executor)
        self.pool: EnginePool | None = None
        self.router: Router | None = None
        self.answerer: Answerer | None = None
        self.cached: CachedAnswerer | None = None
        self.embeddings: EmbeddingCache | None = None
        self.exact: ExactCache | None = None
        self.semantic: SemanticCache | None = None
        self.warm_up_ms: dict[str, float] = {}

    # -- lifecycle ---------------------------------------------------------------------------------------------

    async def start(self, warm_up: bool = True, generation: bool | None = None) -> None:
        """Open everything; `generation=False` skips the engines (CLI tools that only index or search)."""
        started = time.perf_counter()
        s = self.settings
        # numpy's BLAS only serves small per-request products here (MaxSim); its worker threads would spin
        # against ONNX Runtime and the search threads for the same cores, so it gets one thread.
        threadpoolctl.threadpool_limits(limits=1, user_api="blas")
        s.data_dir.mkdir(parents=True, exist_ok=True)
        self._lock_data_dir()
        encoder = await asyncio.to_thread(load_encoder, s.encoder.model, model_path(s.models_dir, s.encoder.model),
                                          s.encoder.threads, s.encoder.max_length)
        self.batcher = MicroBatcher(encoder, s.encoder.batch_window_ms, s.encoder.max_batch, s.encoder.queue_size)
        await self.batcher.start()
        self.store = Store(s.store_path)
        for partition in self.store.partitions():
            indexer = self._indexer(partition)
            try:
                await asyncio.to_thread(indexer.open)
            except Exception as exc:  # derived data: a version that cannot be read is rebuilt from the store
                log.error("partition %s/%s: index unreadable (%s): rebuilding from the store", partition.tenant,
                          partition.name, exc)
                await indexer.catch_up(rebuild=True)
            if indexer.indexed_version != partition.version:  # behind the store (crash) or built by another encoder
                log.info("partition %s/%s: index at v%d, store at v%d: catching up", partition.tenant,
                         partition.name, indexer.indexed_version, partition.version)
            await indexer.catch_up(partition.version)
        if s.demo_corpus and not self.store.partitions():
            await self._ingest_samples()
        if s.generate.enabled if generation is None else generation:
            self.router = load_router(s)
            self.pool = EnginePool(s.small, s.large, s.generate, s.models_dir, s.data_dir, s.admission.wait_budget_s)
            await self.pool.start()
        self.answerer = Answerer(self.pool, self.router, s.generate, s.router, self.search, self._encode_dense,
                                 s.server.request_timeout_s)
        if s.cache.enabled:
            await asyncio.to_thread(self._open_caches, encoder.dim)
        if warm_up:
            await self._warm_up()
        self.boot_ms = (time.perf_counter() - started) * 1000
        self.ready = True
        log.info("ready in %.0f ms: %d partitions", self.boot_ms, len(self.indexers))

    def _open_caches(self, dim: int) -> None:
        s = self.settings
        disk = s.cache.disk_mib * 1024 * 1024 // 2  # half for exact answers, half for the semantic store
        self.embeddings = EmbeddingCache(s.cache.embedding_items)
        self.exact = ExactCache(s.cache_dir / "exact", s.cache.memory_items, s.cache.ttl_s, disk)
        if s.cache.semantic == "on" or (s.cache.semantic == "auto" and s.encoder.model == "minilm"):
            self.semantic = SemanticCache(s.cache_dir / "semantic", dim, semantic_params(s), disk)
        self.cached = CachedAnswerer(self.answerer, self.exact, self.semantic, SingleFlight(s.cache.single_flight_wait_s),
                                     self._query, self.versions, s.generate.temperature == 0)

    async def stop(self) -> None:
        self.ready = False
        if self.pool is not None:
            await self.pool.stop()
        for cache in (self.exact, self.semantic):
            if cache is not None:
                cache.close()
        if self.batcher is not None:
            await self.batcher.stop()
        self._executor.shutdown(wait=True)
        if self.store is not None:
            self.store.close()
        if self._lock_file is not None:
            self._lock_file.close()
            self._lock_file = None

    def _lock_data_dir(self) -> None:
        self._lock_file = open(self.settings.data_dir / ".lock", "a+")
        try:
            fcntl.flock(self._lock_file, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            self._lock_file.close()
            self._lock_file = None
            raise DataDirBusy(f"{self.settings.data_dir} is in use by another appliance process") from None
        self._lock_file.seek(0)
        self._lock_file.truncate()
        self._lock_file.write(str(os.getpid()))
        self._lock_file.flush()

    async def _warm_up(self) -> None:
        """Touch every part once so the first real request pays no loading cost: the encoder, one search per
        partition, and a prefill of every system prefix on each engine (so prefix caching serves them)."""
        started = time.perf_counter()
        assert self.batcher is not None
        query = await self.batcher.encode("warm up")
        self.warm_up_ms["encoder"] = _ms(started)
        t = time.perf_counter()
        for indexer in self.indexers.values():
            snapshot = indexer.snapshot
            if snapshot is not None and snapshot.size:
                await self.searcher.search([Target(indexer.partition.name, snapshot)], query.dense, query.tokens,
                                           self.tokenizer("warm up"), 1, Timings())
        self.warm_up_ms["partitions"] = _ms(t)
        if self.pool is not None:
            concise = self.settings.generate.concise
            self.warm_up_ms["prefixes"] = await self.pool.warm_up(lambda tok: warm_up_prompts(tok, concise))
        log.info("warm-up done in %.0f ms (%s)", _ms(started),
                 ", ".join(f"{k} {v:.0f} ms" for k, v in self.warm_up_ms.items()))

    async def _ingest_samples(self) -> None:
        docs = []
        for path in sorted(SAMPLES.glob("*.md")):
            text = path.read_text(encoding="utf-8")
            docs.append(DocumentInput(id=path.stem, title=markdown_title(text, path.stem), text=text,
                                      source=f"samples/{path.name}"))
        if docs:
            await self.ingest(DEMO_TENANT, DEMO_PARTITION, docs)
            log.info("empty store: ingested %d sample documents into %s/%s", len(docs), DEMO_TENANT, DEMO_PARTITION)

    def _indexer(self, partition) -> PartitionIndexer:
        indexer = self.indexers.get(partition.id)
        if indexer is None:
            assert self.store is not None and self.batcher is not None
            folder = self.settings.index_dir / f"p{partition.id:06d}"
            indexer = PartitionIndexer(partition, folder, self.store, self.batcher, self.tokenizer,
                                       self.settings.index, self.settings.encoder.ingest_batch)
            self.indexers[partition.id] = indexer
        return indexer

    # -- writes ------------------------------------------------------------------------------------------------

    async def ingest(self, tenant: str, partition: str, docs: list[DocumentInput], kind: str | None = None,
                     wait: bool = True) -> IngestResult:
        """Store the documents (durable when this returns) and, with `wait`, index them before returning.

        `kind` is set when the partition is created ("default" if not given); naming another kind for an
        existing partition is refused rather than silently ignored.
        """
        assert self.store is not None
        prepared = await asyncio.to_thread(prepare_documents, docs, self.settings.chunking)
        record = await asyncio.to_thread(self.store.ensure_partition, tenant, partition, kind or "default")
        if kind is not None and record.kind != kind:
            raise KindConflict(f"partition {partition!r} exists with kind {record.kind!r}, not {kind!r}")
        written = await asyncio.to_thread(self.store.upsert_documents, record.id, prepared)
        indexer = self._refresh_record(record.id)
        indexed, error = await self._index(indexer, written.version, wait)
        return IngestResult(tenant, partition, written.version, indexed, written.documents, error)

    async def delete(self, tenant: str, key: str, partition: str | None = None,
                     wait: bool = True) -> list[IngestResult]:
        assert self.store is not None
        results = []
        for record in await asyncio.to_thread(self.store.document_keys, tenant, key):
            if partition is not None and record.name != partition:
                continue
            written = await asyncio.to_thread(self.store.delete_documents, record.id, [key])
            indexer = self._refresh_record(record.id)
            indexed, error = await self._index(indexer, written.version, wait)
            results.append(IngestResult(tenant, record.name, written.version, indexed, written.documents, error))
        return results

    async def reindex(self, tenant: str | None = None, partition: str | None = None) -> list[IngestResult]:
        """Rebuild indexes from the store, re-encoding every chunk."""
        assert self.store is not None
        results = []
        for record in self.store.partitions(tenant):
            if partition is not None and record.name != partition:
                continue
            indexer = self._refresh_record(record.id)
            version = await indexer.catch_up(rebuild=True)
            results.append(IngestResult(record.tenant, record.name, record.version, version))
        return results

    def _refresh_record(self, partition_id: int) -> PartitionIndexer:
        assert self.store is not None
        record = self.store.partition_by_id(partition_id)
        indexer = self._indexer(record)
        indexer.partition = record  # time range and version for partition selection
        return indexer

    async def _index(self, indexer: PartitionIndexer, version: int, wait: bool) -> tuple[int, str | None]:
        """Bring the index to `version`; returns the version indexed and, if the build failed, why."""
        task = asyncio.ensure_future(indexer.catch_up(version))
        task.add_done_callback(_log_failure)
        task.add_done_callback(lambda _: self._invalidate(indexer))
        if not wait:
            return indexer.indexed_version, None
        try:
            return await asyncio.shield(task), None  # a client that goes away does not cancel a shared build
        except Exception as exc:  # stored is stored: report, and let the next write or boot build again
            return indexer.indexed_version, f"{type(exc).__name__}: {exc}"

    def _invalidate(self, indexer: PartitionIndexer) -> None:
        """Semantic entries that used an older version of this partition can never be served again: drop them."""
        if self.semantic is not None:
            p = indexer.partition
            self.semantic.invalidate(p.tenant, p.name, indexer.indexed_version)

    # -- reads -------------------------------------------------------------------------------------------------

    def partitions(self, tenant: str | None = None) -> list[dict]:
        out = []
        for indexer in self.indexers.values():
            p = indexer.partition
            if tenant is not None and p.tenant != tenant:
                continue
            out.append({"tenant": p.tenant, "name": p.name, "kind": p.kind, "version": p.version,
                        "indexed_version": indexer.indexed_version,
                        "chunks": indexer.snapshot.size if indexer.snapshot else 0})
        return out

    async def search(self, query: str, where: PartitionFilter, k: int | None = None,
                     late_interaction: bool | None = None, mode: str = "hybrid") -> SearchResult:
        assert self.batcher is not None
        k = k or self.settings.retrieve.default_k
        timings = Timings()
        started = time.perf_counter()
        chosen = select_partitions([i.partition for i in self.indexers.values()], where)
        targets = [Target(p.name, self.indexers[p.id].snapshot) for p in chosen
                   if self.indexers[p.id].snapshot is not None]
        timings.add("partitions", (time.perf_counter() - started) * 1000)
        if not targets:
            return SearchResult([], [], {**timings.stages, "total": _ms(started)})
        t = time.perf_counter()
        encoded = await self._query(query)
        terms = self.tokenizer(query)
        timings.add("encode", _ms(t))
        hits = await self.searcher.search(targets, encoded.dense, encoded.tokens, terms, k, timings,
                                          late=late_interaction, mode=mode)
        timings.add("total", _ms(started))
        return SearchResult(hits, [t.name for t in targets], timings.stages)

    # -- answers ---------------------------------------------------------------------------------------------

    def ask(self, request: AskRequest):
        """The answer's events: sources, then tokens, then done (or failed). See `answer.py` and, with caches on,
        `cached_answers.py`."""
        assert self.answerer is not None
        return (self.cached or self.answerer).ask(request)

    def versions(self, where: PartitionFilter) -> dict[str, int]:
        """The partitions a request would search and their index versions (what a cached answer depends on)."""
        chosen = select_partitions([i.partition for i in self.indexers.values()], where)
        return {p.name: self.indexers[p.id].indexed_version for p in chosen}

    async def _query(self, text: str):
        """The query's vectors: from the embedding cache, else from the micro-batched encoder."""
        assert self.batcher is not None
        if self.embeddings is not None:
            found = self.embeddings.get(text)
            if found is not None:
                return found
        encoded = await self.batcher.encode(text)
        if self.embeddings is not None:
            self.embeddings.put(text, encoded)
        return encoded

    async def _encode_dense(self, text: str):
        return (await self._query(text)).dense

    def cache_entries(self, tenant: str, limit: int) -> list[dict]:
        return self.semantic.entries(tenant, limit) if self.semantic is not None else []

    def delete_cache_entry(self, tenant: str, entry_id: int) -> bool:
        return self.semantic.delete(tenant, entry_id) if self.semantic is not None else False

    def on_engine_sample(self, listener) -> None:
        """`listener(engine, kind, seconds)` for every TTFT and queue-time sample vLLM reports."""
        if self.pool is not None:
            for role, engine in self.pool.engines.items():
                engine.stats.listener = lambda kind, seconds, role=role: listener(role, kind, seconds)

    def engines(self) -> dict:
        return self.pool.describe() if self.pool is not None else {}


def load_router(settings: Settings) -> Router | None:
    """The router trained for the configured embedder at model-build time, if there is one."""
    folder = model_path(settings.models_dir, f"router-{settings.encoder.model}")
    files = sorted(folder.glob("router.*")) if folder.is_dir() else []
    if not files:
        log.warning("no router model in %s: routing by question length only (run `appliance models build`)",
                    folder)
        return None
    return Router.load(files[0], embedder=settings.encoder.model)


def semantic_params(settings: Settings) -> SemanticParams:
    c = settings.cache
    return SemanticParams(c.semantic_threshold, c.semantic_late_threshold, c.semantic_max_entries, c.ttl_s)


def _ms(since: float) -> float:
    return (time.perf_counter() - since) * 1000


def _log_failure(task: asyncio.Future) -> None:
    if not task.cancelled() and task.exception() is not None:
        log.error("index build failed: %s", task.exception(), exc_info=task.exception())
