"""The library: documents in the store and the partition indexes kept in step with it.

Writes go store first (the acknowledgement), then a new index version per partition; reads take the current
snapshot of each partition a request may search. Whoever depends on a partition's version (the semantic cache)
subscribes with `on_version` and hears of every new one.
"""
from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from .config import ChunkSettings, IndexSettings
from .encode import MicroBatcher
from .index import PartitionSnapshot
from .ingest import DocumentInput, PartitionIndexer, prepare_documents
from .retrieve import PartitionFilter, Target, select_partitions
from .store import DocumentStatus, Partition, Store
from .text import BM25Tokenizer

log = logging.getLogger("appliance")
VersionListener = Callable[[Partition, int], None]  # (partition, version now indexed)


class KindConflict(ValueError):
    """An ingest named a kind other than the one the existing partition has."""


@dataclass(slots=True)
class IngestResult:
    tenant: str
    partition: str
    version: int
    indexed_version: int
    documents: list[DocumentStatus] = field(default_factory=list)
    index_error: str | None = None  # the documents are stored; the index catches up on the next write or boot

    @property
    def indexed(self) -> bool:
        return self.indexed_version >= self.version


@dataclass(slots=True, frozen=True)
class PartitionInfo:
    tenant: str
    name: str
    kind: str
    version: int  # the store's
    indexed_version: int  # the searchable index's (behind while a build runs)
    chunks: int


class Library:
    def __init__(self, store: Store, batcher: MicroBatcher, tokenizer: BM25Tokenizer, index_dir: Path,
                 index: IndexSettings, chunking: ChunkSettings, ingest_batch: int):
        self.store, self.batcher, self.tokenizer = store, batcher, tokenizer
        self._index_dir, self._index_params = index_dir, index
        self._chunking, self._ingest_batch = chunking, ingest_batch
        self._indexers: dict[int, PartitionIndexer] = {}
        self._listeners: list[VersionListener] = []

    async def open(self) -> None:
        """Load every partition's index; rebuild an unreadable one and close any gap with the store."""
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

    def on_version(self, listener: VersionListener) -> None:
        self._listeners.append(listener)

    # -- writes ------------------------------------------------------------------------------------------------

    async def ingest(self, tenant: str, partition: str, docs: list[DocumentInput], kind: str | None = None,
                     wait: bool = True) -> IngestResult:
        """Store the documents (durable when this returns) and, with `wait`, index them before returning.

        `kind` is set when the partition is created ("default" if not given); naming another kind for an
        existing partition is refused rather than silently ignored.
        """
        prepared = await asyncio.to_thread(prepare_documents, docs, self._chunking)
        record = await asyncio.to_thread(self.store.ensure_partition, tenant, partition, kind or "default")
        if kind is not None and record.kind != kind:
            raise KindConflict(f"partition {partition!r} exists with kind {record.kind!r}, not {kind!r}")
        written = await asyncio.to_thread(self.store.upsert_documents, record.id, prepared)
        indexer = self._refresh_record(record.id)
        indexed, error = await self._index(indexer, written.version, wait)
        return IngestResult(tenant, partition, written.version, indexed, written.documents, error)

    async def delete(self, tenant: str, key: str, partition: str | None = None,
                     wait: bool = True) -> list[IngestResult]:
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
        results = []
        for record in self.store.partitions(tenant):
            if partition is not None and record.name != partition:
                continue
            indexer = self._refresh_record(record.id)
            version = await indexer.catch_up(rebuild=True)
            self._announce(indexer)
            results.append(IngestResult(record.tenant, record.name, record.version, version))
        return results

    def _indexer(self, partition: Partition) -> PartitionIndexer:
        indexer = self._indexers.get(partition.id)
        if indexer is None:
            folder = self._index_dir / f"p{partition.id:06d}"
            indexer = PartitionIndexer(partition, folder, self.store, self.batcher, self.tokenizer, self._index_params,
                                       self._ingest_batch)
            self._indexers[partition.id] = indexer
        return indexer

    def _refresh_record(self, partition_id: int) -> PartitionIndexer:
        record = self.store.partition_by_id(partition_id)
        indexer = self._indexer(record)
        indexer.partition = record  # time range and version for partition selection
        return indexer

    async def _index(self, indexer: PartitionIndexer, version: int, wait: bool) -> tuple[int, str | None]:
        """Bring the index to `version`; returns the version indexed and, if the build failed, why."""
        task = asyncio.ensure_future(indexer.catch_up(version))
        task.add_done_callback(_log_failure)
        task.add_done_callback(lambda _: self._announce(indexer))
        if not wait:
            return indexer.indexed_version, None
        try:
            return await asyncio.shield(task), None  # a client that goes away does not cancel a shared build
        except Exception as exc:  # stored is stored: report, and let the next write or boot build again
            return indexer.indexed_version, f"{type(exc).__name__}: {exc}"

    def _announce(self, indexer: PartitionIndexer) -> None:
        for listener in self._listeners:
            listener(indexer.partition, indexer.indexed_version)

    # -- reads -------------------------------------------------------------------------------------------------

    def partitions(self, tenant: str | None = None) -> list[PartitionInfo]:
        out = []
        for indexer in self._indexers.values():
            p = indexer.partition
            if tenant is None or p.tenant == tenant:
                chunks = indexer.snapshot.size if indexer.snapshot is not None else 0
                out.append(PartitionInfo(p.tenant, p.name, p.kind, p.version, indexer.indexed_version, chunks))
        return out

    def targets(self, where: PartitionFilter) -> list[Target]:
        """The searchable snapshots of the partitions a request may search, as they are now."""
        return [Target(p.name, snapshot) for p in self._select(where)
                if (snapshot := self._indexers[p.id].snapshot) is not None]

    def versions(self, where: PartitionFilter) -> dict[str, int]:
        """The partitions a request would search and their index versions (what a cached answer depends on)."""
        return {p.name: self._indexers[p.id].indexed_version for p in self._select(where)}

    def snapshot(self, tenant: str, name: str) -> PartitionSnapshot | None:
        """One partition's current snapshot, if it has been indexed."""
        for indexer in self._indexers.values():
            if indexer.partition.tenant == tenant and indexer.partition.name == name:
                return indexer.snapshot
        return None

    def snapshots(self) -> list[PartitionSnapshot]:
        """Every partition's current snapshot (warm-up, benchmarks)."""
        return [i.snapshot for i in self._indexers.values() if i.snapshot is not None]

    def _select(self, where: PartitionFilter) -> list[Partition]:
        return select_partitions([i.partition for i in self._indexers.values()], where)


def _log_failure(task: asyncio.Future) -> None:
    if not task.cancelled() and task.exception() is not None:
        log.error("index build failed: %s", task.exception(), exc_info=task.exception())
