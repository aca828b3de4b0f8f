"""The library: documents in the store and the partition indexes kept in step with it.

Writes go store first (the acknowledgement), then a new index version per partition; reads take the current
snapshot of each partition a request may search. Whoever depends on a partition's version (the semantic cache)
subscribes with `on_version` and hears of every new one.
"""
from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path

from ..config import ChunkSettings, IndexSettings, QuotaSettings
from ..encode import EncoderSet
from ..index import PartitionSnapshot
from ..retrieve import PartitionFilter, Target, select_partitions
from ..store import BlobStore, FileDocument, NewDocument, Partition, Store
from ..text import AUTO, LANGUAGES, BM25Tokenizer, detect_language
from .ingest import DocumentInput, PartitionIndexer, prepare_documents
from .journal import ReplicationJournal
from .quotas import check_quota
from .records import IngestResult, KindConflict, LanguageConflict, PartitionInfo

log = logging.getLogger("appliance")
VersionListener = Callable[[Partition, int], None]  # (partition, version now indexed)


class Library:
    def __init__(self, store: Store, encoders: EncoderSet, tokenizer: BM25Tokenizer, index_dir: Path,
                 index: IndexSettings, chunking: ChunkSettings, ingest_batch: int,
                 quota: QuotaSettings = QuotaSettings(), blobs: BlobStore | None = None):
        self.store, self.encoders, self.tokenizer = store, encoders, tokenizer
        self.blobs = blobs or BlobStore(index_dir.parent / "files")
        self.journal = ReplicationJournal(store)  # what the cluster's replicator pages and keeps
        self._index_dir, self._index_params = index_dir, index
        self._chunking, self._ingest_batch = chunking, ingest_batch
        self._quota = quota
        self._indexers: dict[int, PartitionIndexer] = {}
        self._listeners: list[VersionListener] = []
        self._admit_lock = asyncio.Lock()  # a quota check and the write it allowed are one step

    async def open(self) -> None:
        """Load every partition's index; rebuild an unreadable one and close any gap with the store."""
        for partition in self.store.partitions():
            if partition.language == AUTO:  # a store from before languages, or a partition still empty
                partition = await asyncio.to_thread(self._decide_stored_language, partition)
            indexer = self._indexer(partition)
            try:
                await asyncio.to_thread(indexer.open)
            except Exception as exc:  # derived data: a version that cannot be read is rebuilt from the store
                log.error("partition %s/%s: index unreadable (%s): rebuilding from the store", partition.tenant,
                          partition.name, exc)
                await indexer.catch_up(rebuild=True)
            if indexer.built_otherwise:
                log.warning("partition %s/%s: index built by another encoder or for another language (now %s, %s): "
                            "building it again from the store", partition.tenant, partition.name,
                            indexer.batcher.encoder.name, indexer.partition.language)
            elif indexer.indexed_version != partition.version:  # behind the store (a crash)
                log.info("partition %s/%s: index at v%d, store at v%d: catching up", partition.tenant,
                         partition.name, indexer.indexed_version, partition.version)
            await indexer.catch_up(partition.version)
            if indexer.needs_recoding:  # served as it is meanwhile: re-coding a big partition takes minutes
                log.warning("partition %s/%s: token vectors kept as int8; `appliance reindex --tokens` re-codes "
                            "them as residuals, ~7x smaller, without encoding text again", partition.tenant,
                            partition.name)

    def on_version(self, listener: VersionListener) -> None:
        self._listeners.append(listener)

    # -- writes ------------------------------------------------------------------------------------------------

    async def ingest(self, tenant: str, partition: str, docs: list[DocumentInput], kind: str | None = None,
                     wait: bool = True, wait_timeout_s: float | None = None, *,
                     language: str | None = None) -> IngestResult:
        """Store the documents (durable when this returns) and, with `wait`, index them before returning (or once
        `wait_timeout_s` has passed: the build goes on).

        `kind` and `language` are set when the partition is created ("default"; `auto`: the language of its first
        documents); naming another kind or language for an existing partition is refused rather than silently
        ignored (`reindex` changes a language).
        """
        prepared = await asyncio.to_thread(prepare_documents, docs, self._chunking)
        return await self.write(tenant, partition, prepared, kind, wait, wait_timeout_s, language=language)

    async def write(self, tenant: str, partition: str, prepared: list[NewDocument], kind: str | None = None,
                    wait: bool = True, wait_timeout_s: float | None = None,
                    files: dict[str, bytes | Path] | None = None, *, language: str | None = None,
                    origin: str | None = None, on_stored: Callable[[], None] | None = None) -> IngestResult:
        """Store prepared documents (with the original bytes of those that came from files, by sha256), then
        index them as `ingest` does. A file no document refers to any more (replaced) is removed. `origin`: the
        peer box a replicated write comes from (it checked the quotas when its client wrote). `on_stored` is
        called once the documents and files are stored, before the index wait (an upload's spool is free then)."""
        async with self._admit_lock:
            record, decided = await asyncio.to_thread(self._admit, tenant, partition, kind, language, prepared,
                                                      origin is None)
            replaced = await asyncio.to_thread(self.store.file_documents, record.id, [d.key for d in prepared])
            for sha256, data in (files or {}).items():
                await asyncio.to_thread(self.blobs.put, data, sha256)
            try:
                written = await asyncio.to_thread(self.store.upsert_documents, record.id, prepared, origin)
            except BaseException:  # not stored (a full disk): the files written for it go too
                await asyncio.to_thread(self._discard_files, list(files or {}))
                raise
            await asyncio.to_thread(self._discard_files, [d.file.sha256 for d in replaced if d.file])
            if decided is not None:  # once its documents are stored: a write that failed decides nothing
                await asyncio.to_thread(self.store.set_language, record.id, decided)
                log.info("partition %s/%s: language %s (%s)", tenant, partition, decided,
                         "as asked" if language == decided else "detected from its first documents")
        if on_stored is not None:
            on_stored()
        indexer = self._refresh_record(record.id)
        indexed, error = await self._index(indexer, written.version, wait, wait_timeout_s)
        return IngestResult(tenant, partition, written.version, indexed, written.documents, error, written.seq)

    def _discard_files(self, sha256s: list[str]) -> None:
        for sha256 in set(sha256s):
            if not self.store.file_referenced(sha256):
                self.blobs.discard(sha256)

    async def delete(self, tenant: str, key: str, partition: str | None = None, wait: bool = True,
                     wait_timeout_s: float | None = None, origin: str | None = None) -> list[IngestResult]:
        results = []
        for record in await asyncio.to_thread(self.store.document_keys, tenant, key):
            if partition is not None and record.name != partition:
                continue
            async with self._admit_lock:
                files = await asyncio.to_thread(self.store.file_documents, record.id, [key])
                written = await asyncio.to_thread(self.store.delete_documents, record.id, [key], origin)
                await asyncio.to_thread(self._discard_files, [d.file.sha256 for d in files if d.file])
            indexer = self._refresh_record(record.id)
            indexed, error = await self._index(indexer, written.version, wait, wait_timeout_s)
            results.append(IngestResult(tenant, record.name, written.version, indexed, written.documents, error,
                                        written.seq))
        return results

    async def reindex(self, tenant: str | None = None, partition: str | None = None,
                      language: str | None = None, tokens_only: bool = False) -> list[IngestResult]:
        """Rebuild indexes from the store, re-encoding every chunk; with `language` ("en", "zh", "multi", or
        "auto": decided again from the stored text), the partitions get that language and its encoder.
        `tokens_only`: only re-code int8 token vectors into the configured codec, from the vectors the index
        keeps (no text encoded again; partitions that need none are left as they are)."""
        check_reindex(language, tokens_only)
        results = []
        for record in await asyncio.to_thread(self.store.partitions, tenant):
            if partition is not None and record.name != partition:
                continue
            if language is not None:
                async with self._admit_lock:  # not between a first ingest's storing and its deciding the language
                    await asyncio.to_thread(self.store.set_language, record.id, language)
                    if language == AUTO:
                        await asyncio.to_thread(self._decide_stored_language, self.store.partition_by_id(record.id))
            indexer = self._refresh_record(record.id)
            if tokens_only:
                if not indexer.needs_recoding:
                    continue  # residuals already, or too few tokens for a codebook yet, or int8 by the settings
                version = await indexer.catch_up(record.version, recode=True)
            else:
                version = await indexer.catch_up(rebuild=True)
            self._announce(indexer)
            results.append(IngestResult(record.tenant, record.name, indexer.partition.version, version))
        return results

    async def set_dense_weight(self, tenant: str, partition: str, weight: float | None) -> PartitionInfo:
        """Give the partition its own weight of the vector list in hybrid fusion (None: back to its language's);
        the next search uses it. Raises LookupError where the tenant has no such partition."""
        async with self._admit_lock:  # the record read back is the newest: no write refreshes it meanwhile
            record = await asyncio.to_thread(self.store.get_partition, tenant, partition)
            if record is None or record.id not in self._indexers:
                raise LookupError(f"no partition {partition!r} for tenant {tenant!r}")
            await asyncio.to_thread(self.store.set_dense_weight, record.id, weight)
            indexer = self._refresh_record(record.id)
        return next(info for info, i in self._infos(tenant) if i is indexer)

    def _admit(self, tenant: str, name: str, kind: str | None, language: str | None,
               prepared: list[NewDocument], quotas: bool = True) -> tuple[Partition, str | None]:
        """The partition to write into, once the write is known to fit the quotas (store reads: a worker thread),
        and the language it takes if it is still `auto`: the one asked, else that of the first documents with
        text (None: still undecided)."""
        existing = self.store.get_partition(tenant, name)
        q = self._quota
        if quotas and (q.max_documents or q.max_partitions or q.max_text_bytes or q.max_file_bytes):
            check_quota(q, self.store, tenant, existing, prepared)
        asked = language if language not in (None, AUTO) else None
        if existing is not None and asked is not None and existing.language not in (AUTO, asked):
            raise LanguageConflict(f"partition {name!r} holds language {existing.language!r}, not {asked!r}: "
                                   f"re-index it to change (appliance reindex --language {asked})")
        record = existing or self.store.ensure_partition(tenant, name, kind or "default", asked or AUTO)
        if kind is not None and record.kind != kind:
            raise KindConflict(f"partition {name!r} exists with kind {record.kind!r}, not {kind!r}")
        if record.language != AUTO:
            return record, None
        texts = [chunk for doc in prepared for chunk in (doc.title, *doc.chunks[:4]) if chunk]
        return record, asked or (detect_language(texts) if texts else None)

    def _decide_stored_language(self, partition: Partition) -> Partition:
        """Decide an `auto` partition's language from its stored text (none yet: it stays auto)."""
        texts = self.store.sample_texts(partition.id)
        if not texts:
            return partition
        language = detect_language(texts)
        self.store.set_language(partition.id, language)
        log.info("partition %s/%s: language %s (detected from its stored text)", partition.tenant, partition.name,
                 language)
        return self.store.partition_by_id(partition.id)

    def _indexer(self, partition: Partition) -> PartitionIndexer:
        indexer = self._indexers.get(partition.id)
        if indexer is None:
            folder = self._index_dir / f"p{partition.id:06d}"
            indexer = PartitionIndexer(partition, folder, self.store, self.encoders, self.tokenizer,
                                       self._index_params, self._ingest_batch)
            self._indexers[partition.id] = indexer
        return indexer

    def _refresh_record(self, partition_id: int) -> PartitionIndexer:
        record = self.store.partition_by_id(partition_id)
        indexer = self._indexer(record)
        indexer.partition = record  # time range and version for partition selection
        return indexer

    async def _index(self, indexer: PartitionIndexer, version: int, wait: bool,
                     timeout_s: float | None) -> tuple[int, str | None]:
        """Bring the index to `version`; returns the version indexed and, if the build failed, why."""
        task = asyncio.ensure_future(indexer.catch_up(version))
        task.add_done_callback(_log_failure)
        task.add_done_callback(lambda _: self._announce(indexer))
        if not wait:
            return indexer.indexed_version, None
        # at most `timeout_s` (a server's clients: server.ingest_wait_timeout_s); neither that nor a client going
        # away cancels the shared build
        await asyncio.wait([task], timeout=timeout_s)
        if not task.done():
            return indexer.indexed_version, None  # stored; indexing goes on (the client gets a 202)
        if task.cancelled():
            return indexer.indexed_version, "index build cancelled (shutting down)"
        if task.exception() is not None:  # stored is stored: report, and let the next write or boot build again
            return indexer.indexed_version, f"{type(task.exception()).__name__}: {task.exception()}"
        return task.result(), None

    def _announce(self, indexer: PartitionIndexer) -> None:
        for listener in self._listeners:
            listener(indexer.partition, indexer.indexed_version)

    # -- reads -------------------------------------------------------------------------------------------------

    def partitions(self, tenant: str | None = None) -> list[PartitionInfo]:
        return [info for info, _ in self._infos(tenant)]

    def _infos(self, tenant: str | None) -> list[tuple[PartitionInfo, PartitionIndexer]]:
        out = []
        for indexer in list(self._indexers.values()):  # one C-level copy: safe against an insert on the loop
            p = indexer.partition
            if tenant is None or p.tenant == tenant:
                snapshot = indexer.snapshot
                out.append((PartitionInfo(p.tenant, p.name, p.kind, p.version, indexer.indexed_version,
                                          snapshot.size if snapshot is not None else 0, p.language,
                                          snapshot.encoder if snapshot is not None else "", p.dense_weight),
                            indexer))
        return out

    def partition_details(self, tenant: str | None = None, name: str | None = None) -> list[PartitionInfo]:
        """`partitions` (or the one named) with each one's documents and index size on disk (store and disk reads:
        call from a worker thread; an ingest may add a partition meanwhile, so the indexers are copied first)."""
        out = []
        for info, indexer in self._infos(tenant):
            if name is not None and info.name != name:
                continue
            snapshot = indexer.snapshot
            out.append(replace(info, documents=self.store.count_documents(indexer.partition.id),
                               index_bytes=snapshot.disk_bytes()[0] if snapshot is not None else 0))
        return out

    def tenants(self) -> list[str]:
        """Every tenant that has a partition, by name."""
        return sorted({indexer.partition.tenant for indexer in list(self._indexers.values())})

    def list_documents(self, tenant: str, partition: str, after: str = "",
                       limit: int = 100) -> list[FileDocument] | None:
        """A page of the partition's documents in id order; None when there is no such partition (a store read:
        call from a worker thread)."""
        record = self.store.get_partition(tenant, partition)
        return None if record is None else self.store.list_documents(record.id, after, limit)

    # -- documents that came from files (store reads: call from a worker thread) -------------------------------

    def stored_versions(self, tenant: str, partition: str,
                        keys: list[str]) -> dict[str, tuple[str, FileDocument | None]]:
        """The content hash (and file, if any) of those of `keys` the partition holds."""
        record = self.store.get_partition(tenant, partition)
        if record is None:
            return {}
        files = {d.key: d for d in self.store.file_documents(record.id, keys)}
        return {k: (d.content_hash, files.get(k)) for k, d in self.store.stored_documents(record.id, keys).items()}

    def file_documents(self, tenant: str, partition: str) -> list[FileDocument]:
        """The partition's documents that came from files (none where there is no such partition)."""
        record = self.store.get_partition(tenant, partition)
        return self.store.file_documents(record.id) if record is not None else []

    def find_file(self, tenant: str, key: str, partition: str | None = None) -> tuple[FileDocument, Path] | None:
        """A document of the tenant's that came from a file, and where its kept file is; None where the tenant has
        no such document (in `partition`, when named)."""
        for record in self.store.document_keys(tenant, key):
            if partition is not None and record.name != partition:
                continue
            for doc in self.store.file_documents(record.id, [key]):
                return doc, self.blobs.path(doc.file.sha256)
        return None

    def read_file(self, sha256: str) -> bytes:
        """The bytes of a kept file."""
        return self.blobs.read(sha256)

    def stored_partitions(self, tenant: str | None = None) -> list[tuple[str, str]]:
        """(tenant, name) of every partition in the store (or the tenant's), in the order they were made."""
        return [(p.tenant, p.name) for p in self.store.partitions(tenant)]

    def forget_hashes(self, tenant: str, partition: str, keys: list[str]) -> None:
        """Make the next write of these documents count as a change (parsing the same bytes again on purpose)."""
        record = self.store.get_partition(tenant, partition)
        if record is not None:
            self.store.forget_hashes(record.id, keys)

    def targets(self, where: PartitionFilter) -> list[Target]:
        """The searchable snapshots of the partitions a request may search, as they are now, each with the language
        it was built for (while a re-index to another language runs, the partition's is already the new one)."""
        return [Target(p.name, snapshot, snapshot.language or p.language, p.dense_weight) for p in self._select(where)
                if (snapshot := self._indexers[p.id].snapshot) is not None]

    def versions(self, where: PartitionFilter) -> dict[str, int]:
        """The partitions a request would search and their index versions, and the version of each one's own
        settings under `name#settings` once they have changed (no partition name holds a #): what a cached answer
        depends on. Both only go up, so an answer computed under newer ones than it is stored with is never found."""
        versions = {}
        for p in self._select(where):
            versions[p.name] = self._indexers[p.id].indexed_version
            if p.settings_version:
                versions[f"{p.name}#settings"] = p.settings_version
        return versions

    def snapshot(self, tenant: str, name: str) -> PartitionSnapshot | None:
        """One partition's current snapshot, if it has been indexed."""
        for indexer in self._indexers.values():
            if indexer.partition.tenant == tenant and indexer.partition.name == name:
                return indexer.snapshot
        return None

    def snapshots(self) -> list[PartitionSnapshot]:
        """Every partition's current snapshot (warm-up, benchmarks)."""
        return [i.snapshot for i in self._indexers.values() if i.snapshot is not None]

    async def prefetch(self, budget_bytes: int) -> int:
        """Bring the partitions' index files into the page cache (in a worker thread), the smallest partition
        first so that one huge partition does not take the whole budget; returns the bytes read."""
        def read(snapshots: list[PartitionSnapshot]) -> int:
            done = 0
            for snapshot in snapshots:
                if done >= budget_bytes:
                    break
                done += snapshot.prefetch(budget_bytes - done)
            return done

        return await asyncio.to_thread(read, sorted(self.snapshots(), key=lambda s: s.size))  # listed on the loop

    def _select(self, where: PartitionFilter) -> list[Partition]:
        return select_partitions([i.partition for i in self._indexers.values()], where)


def check_reindex(language: str | None, tokens_only: bool) -> None:
    """Refuse (ValueError) a re-index that cannot be done as asked, before anything changes."""
    if tokens_only and language is not None:
        raise ValueError("re-coding token vectors keeps the encoder: it takes no language")
    if language is not None and language != AUTO and language not in LANGUAGES:
        raise ValueError(f"language must be auto or one of {list(LANGUAGES)}, not {language!r}")


def _log_failure(task: asyncio.Future) -> None:
    if not task.cancelled() and task.exception() is not None:
        log.error("index build failed: %s", task.exception(), exc_info=task.exception())
