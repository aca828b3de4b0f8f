"""Builds the services from the settings, in boot order, and takes them down in the reverse order.

`open_services` is the one place that knows how the stages fit together: the data-folder lock, the encoder and
its micro-batcher, the store and the partition indexes (the library), the caches, the engines and the router,
the retriever and the answer path, then warm-up. What it yields is frozen: every part exists once it is
yielded, and nothing outside reaches past a service into its parts.
"""
from __future__ import annotations

import asyncio
import contextlib
import fcntl
import logging
import os
import time
from collections.abc import AsyncIterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol

import threadpoolctl

from .answers import Answerer, AskRequest, CachedAnswerer, Event, FollowUpAnswers, StandaloneQuestions
from .cache import CacheAdmin, EmbeddingCache, ExactCache, SemanticCache, SemanticParams, SingleFlight
from .cluster import Replicator, Site, load_secret
from .config import ParseSettings, Settings
from .encode import CharVectors, EncoderSet, GraphChoice, MicroBatcher, load_encoder
from .generate import EngineSet, build_vllm_engines, warm_up_prompts
from .library import DocumentInput, FileIngester, Library, QuotaExceeded, Reindexer
from .parse import ParseLimits, ParserPool
from .paths import model_folder
from .retrieve import HybridSearcher, PartitionFilter, Retriever
from .router import Router
from .store import BlobStore, Store
from .text import BM25Tokenizer, markdown_title
from .timings import ms_since

log = logging.getLogger("appliance")
SAMPLES = Path(__file__).parent / "samples"
DEMO_TENANT, DEMO_PARTITION = "default", "demo"
CALIBRATED_ENCODERS = ("minilm",)  # the semantic cache's English threshold was chosen on MiniLM's QQP vectors
WARM_TENANTS = 16  # tenants whose prefixes boot prefills (each is a few prefills per engine); others warm as they ask


class DataDirBusy(RuntimeError):
    """Another appliance process holds this data folder."""


class Answers(Protocol):
    def ask(self, req: AskRequest) -> AsyncIterator[Event]:
        """The answer's events: sources, then tokens, then done (or failed)."""
        ...


@dataclass(slots=True, frozen=True)
class BootReport:
    boot_ms: float
    warm_up_ms: dict[str, float] = field(default_factory=dict)
    encoder_graphs: dict[str, GraphChoice] = field(default_factory=dict)  # ONNX encoders: the graph each runs on


@dataclass(slots=True, frozen=True)
class Services:
    settings: Settings
    library: Library
    files: FileIngester
    reindexer: Reindexer  # re-indexes asked over HTTP, in the background
    retriever: Retriever
    questions: StandaloneQuestions  # follow-ups made standalone (the answers use it; evaluation too)
    answers: Answers
    engines: EngineSet  # empty when generation is off
    cache_admin: CacheAdmin
    boot: BootReport
    cluster: Replicator | None = None  # on a site of several boxes (cluster.boxes): the tenants' second copies


@contextlib.asynccontextmanager
async def open_services(settings: Settings, *, warm_up: bool = True,
                        generation: bool | None = None) -> AsyncIterator[Services]:
    """Everything the server (or a CLI command) needs, started; `generation=False` skips the engines (tools that
    only index or search)."""
    started = time.perf_counter()
    s = settings
    # numpy's BLAS only serves small per-request products here (MaxSim); its worker threads would spin against
    # ONNX Runtime and the search threads for the same cores, so it gets one thread.
    threadpoolctl.threadpool_limits(limits=1, user_api="blas")
    async with contextlib.AsyncExitStack() as stack:
        stack.enter_context(lock_data_dir(s.data_dir))
        encoders = await _open_encoders(s)
        stack.push_async_callback(encoders.stop)  # before they start: one that fails to start stops the others
        await encoders.start()
        store = Store(s.store_path)
        stack.callback(store.close)
        tokenizer = BM25Tokenizer()
        library = Library(store, encoders, tokenizer, s.index_dir, s.index, s.chunking, s.encoder.ingest_batch,
                          s.quota, BlobStore(s.files_dir))
        await library.open()
        cluster = await _open_cluster(s, library, stack) if s.cluster.boxes else None
        parser = ParserPool(s.parse.workers, s.parse.timeout_s, s.parse.max_memory_mib,
                            parse_limits(s.parse, s.models_dir))
        stack.push_async_callback(parser.close)
        files = FileIngester(library, parser, s.chunking, s.parse.max_file_bytes)
        reindexer = Reindexer(library, s.index.reindex_per_tenant, s.index.reindex_queued)
        stack.push_async_callback(reindexer.close)
        if s.demo_corpus and cluster is None and not store.partitions():  # a site's tenants are placed, not demo
            await _ingest_samples(library)
        executor = ThreadPoolExecutor(s.retrieve.search_threads, thread_name_prefix="search")
        stack.callback(executor.shutdown, wait=True)
        caches = _open_caches(s, {b.encoder.name: b.encoder.dim for b in encoders}, stack) if s.cache.enabled else None
        chars = {b.encoder.name: CharVectors(b.encoder) for b in encoders if not b.encoder.has_token_vectors}
        retriever = Retriever(library, encoders, tokenizer, HybridSearcher(s.retrieve, executor),
                              caches.embeddings if caches else None, s.retrieve.default_k, chars)
        engines, routers = await _open_engines(s, stack, s.generate.enabled if generation is None else generation)
        answerer = Answerer(retriever, engines, routers, s.generate, s.router, s.server.request_timeout_s,
                            s.conversation)
        answers: Answers = answerer
        semantic = caches.semantic if caches else None
        if caches:
            answers = CachedAnswerer(answerer, retriever, caches.exact, semantic,
                                     SingleFlight(s.cache.single_flight_wait_s), library.versions,
                                     s.generate.temperature == 0)
            if semantic is not None:  # entries that used an older version of a partition can never be served
                library.on_version(lambda p, version: semantic.invalidate(p.tenant, p.name, version))
        questions = StandaloneQuestions(engines, s.conversation)
        answers = FollowUpAnswers(answers, questions)
        warm = await _warm_up(s, retriever, encoders, chars, library, engines) if warm_up else {}
        graphs = {b.encoder.name: b.encoder.graphs for b in encoders if b.encoder.graphs is not None}
        boot = BootReport(ms_since(started), warm, graphs)
        log.info("ready in %.0f ms: %d partitions", boot.boot_ms, len(library.partitions()))
        admin = CacheAdmin(semantic, caches.exact, caches.embeddings) if caches else CacheAdmin(None)
        yield Services(s, library, files, reindexer, retriever, questions, answers, engines, admin, boot, cluster)


async def _open_cluster(s: Settings, library: Library, stack: contextlib.AsyncExitStack) -> Replicator:
    """This box's part of the site: caught up from its peers' journals (as far as they answer), then pulling."""
    site = Site(s.cluster.members, s.cluster.self)
    cluster = Replicator(site, s.cluster, await asyncio.to_thread(load_secret, s.cluster.secret_file), library)
    stack.push_async_callback(cluster.stop)
    started = time.perf_counter()
    await cluster.catch_up()
    log.info("cluster: box %s of %d, caught up in %.0f ms", site.me.name, len(site.boxes), ms_since(started))
    cluster.start()
    return cluster


def parse_limits(settings: ParseSettings, models_dir: Path) -> ParseLimits:
    ocr = model_folder(models_dir, settings.ocr_model) if settings.ocr_model else None
    if ocr is not None and not (ocr / "det.onnx").is_file():
        log.warning("parse.ocr_model %r is not built in %s: scanned pages are refused (appliance models build)",
                    settings.ocr_model, ocr)
        ocr = None
    return ParseLimits(max_unpacked_bytes=settings.max_unpacked_bytes, max_parts=settings.max_parts,
                       max_pages=settings.max_pages, ocr_models=str(ocr or ""), max_ocr_pages=settings.max_ocr_pages)


@contextlib.contextmanager
def lock_data_dir(data_dir: Path):
    """One process per data folder: an exclusive lock on `.lock`, released when the services close."""
    data_dir.mkdir(parents=True, exist_ok=True)
    lock_file = open(data_dir / ".lock", "a+")
    try:
        fcntl.flock(lock_file, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        lock_file.close()
        raise DataDirBusy(f"{data_dir} is in use by another appliance process") from None
    try:
        lock_file.seek(0)
        lock_file.truncate()
        lock_file.write(str(os.getpid()))
        lock_file.flush()
        yield
    finally:
        lock_file.close()


@dataclass(slots=True, frozen=True)
class _Caches:
    embeddings: EmbeddingCache
    exact: ExactCache
    semantic: SemanticCache | None  # None: cache.semantic = "off", or no encoder it was calibrated for (auto)


async def _open_encoders(s: Settings) -> EncoderSet:
    """Every encoder a partition language may need (settings `encoder.en`, `zh`, `multi`), each batched on its own."""
    batchers = {}
    for name in s.encoder.names():
        encoder = await asyncio.to_thread(load_encoder, name, model_folder(s.models_dir, name), s.encoder.threads,
                                          s.encoder.max_length, s.encoder.graph)
        if (graphs := encoder.graphs) is not None:
            log.info("encoder %s: queries on its %s graph, passages on %s (median ms per query %s, per passage "
                     "batch %s; %s)", name, graphs.query, graphs.passage, graphs.query_ms, graphs.passage_ms,
                     graphs.reason)
        batchers[name] = MicroBatcher(encoder, s.encoder.batch_window_ms, s.encoder.max_batch, s.encoder.queue_size)
    return EncoderSet(batchers, s.encoder.for_language)


def _open_caches(s: Settings, dims: dict[str, int], stack: contextlib.AsyncExitStack) -> _Caches:
    disk = s.cache.disk_mib * 1024 * 1024 // 2  # half for exact answers, half for the semantic store
    embeddings = EmbeddingCache(s.cache.embedding_items, s.cache.embedding_mib << 20)
    exact = ExactCache(s.cache_dir / "exact", s.cache.memory_items, s.cache.ttl_s, disk)
    stack.callback(exact.close)
    semantic = None
    if s.cache.semantic == "auto":  # the encoders whose thresholds were measured: MiniLM (QQP)
        dims = {name: dim for name, dim in dims.items() if name in CALIBRATED_ENCODERS}
    if s.cache.semantic != "off" and dims:
        semantic = SemanticCache(s.cache_dir / "semantic", dims, SemanticParams.of(s.cache), disk)
        stack.callback(semantic.close)
    return _Caches(embeddings, exact, semantic)


async def _open_engines(s: Settings, stack: contextlib.AsyncExitStack,
                        generation: bool) -> tuple[EngineSet, dict[str, Router]]:
    if not generation:
        return EngineSet({}), {}
    routers = {name: router for name in s.encoder.names() if (router := load_router(s, name)) is not None}
    engines = build_vllm_engines(s.engines(), s.generate, s.models_dir, s.data_dir, s.admission.wait_budget_s)
    stack.push_async_callback(engines.stop)
    await engines.start()
    return engines, routers


def load_router(settings: Settings, encoder: str | None = None) -> Router | None:
    """The router trained at model-build time on `encoder`'s embeddings (default: English's), if there is one."""
    encoder = encoder or settings.encoder.for_language("en")
    folder = model_folder(settings.models_dir, f"router-{encoder}")
    files = sorted(folder.glob("router.*")) if folder.is_dir() else []
    if not files:
        log.warning("no router model in %s: questions encoded by %s are routed by length only (run `appliance "
                    "models build`)", folder, encoder)
        return None
    return Router.load(files[0], embedder=encoder)


async def _warm_up(s: Settings, retriever: Retriever, encoders: EncoderSet, chars: dict[str, CharVectors],
                   library: Library, engines: EngineSet) -> dict[str, float]:
    """Touch every part once so the first real request pays no loading cost: the encoders (and, on a box with a
    Chinese partition, the common characters' vectors), one search per partition, and a prefill of every system
    prefix on each engine (so prefix caching serves them)."""
    warm: dict[str, float] = {}
    started = time.perf_counter()
    for name in encoders.names():
        await retriever.encode("warm up", encoder=name)
    if any(info.language == "zh" for info in library.partitions()):
        for vectors in chars.values():
            await asyncio.to_thread(vectors.warm_up)
    warm["encoder"] = ms_since(started)
    t = time.perf_counter()
    if s.index.warm_max_mib:
        budget = min(s.index.warm_max_mib << 20, _available_memory() // 2)
        read = await library.prefetch(budget)
        warm["index_files"] = ms_since(t)
        log.info("warm-up read %.0f MiB of index files in %.0f ms", read / 2**20, warm["index_files"])
        t = time.perf_counter()
    for info in library.partitions():
        if info.chunks:
            await retriever.search("warm up", PartitionFilter(info.tenant, (info.name,)), 1)
    warm["partitions"] = ms_since(t)
    if engines:
        # each tenant's prompts have their own prefix-cache salt: warm the prefixes of the tenants there are
        tenants = library.tenants()[:WARM_TENANTS] or [None]
        warm["prefixes"] = await engines.warm_up(lambda tok: warm_up_prompts(tok, s.generate.concise), tenants)
    log.info("warm-up done in %.0f ms (%s)", ms_since(started), ", ".join(f"{k} {v:.0f} ms" for k, v in warm.items()))
    return warm


def _available_memory() -> int:
    """Bytes of memory available now (MemAvailable: free plus what the kernel can reclaim)."""
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")


async def _ingest_samples(library: Library) -> None:
    docs = []
    for path in sorted(SAMPLES.glob("*.md")):
        text = path.read_text(encoding="utf-8")
        docs.append(DocumentInput(id=path.stem, title=markdown_title(text, path.stem), text=text,
                                  source=f"samples/{path.name}"))
    if docs:
        try:
            await library.ingest(DEMO_TENANT, DEMO_PARTITION, docs)
        except QuotaExceeded as exc:  # the operator's quotas win over a sample; the server still starts
            log.warning("sample corpus not ingested: %s", exc)
            return
        log.info("empty store: ingested %d sample documents into %s/%s", len(docs), DEMO_TENANT, DEMO_PARTITION)
