"""The write path: validated documents -> chunks -> store (acknowledged) -> encoded -> next index version.

The store commit is the acknowledgement: once it returns, the documents survive a crash. Each partition has one
indexer that brings its index up to the store's version; concurrent ingests into a partition coalesce into one
index build, and a search reads the previous version until the new one is swapped in. After a crash between the
commit and the swap, boot finds the index behind the store and builds the same delta again.
"""
from __future__ import annotations

import asyncio
import json
import logging
import time
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import numpy as np

from ..config import ChunkSettings, IndexSettings
from ..encode import EncoderSet, MicroBatcher
from ..index import NewChunks, PartitionSnapshot, build_version, collect_garbage, current_version, needs_recoding
from ..store import ChunkRow, NewDocument, Partition, Store
from ..text import BM25Tokenizer, chunk_text, content_hash

log = logging.getLogger("appliance.ingest")


@dataclass(slots=True, frozen=True)
class DocumentInput:
    """A document as a client sends it (already validated for types)."""
    text: str
    title: str = ""
    id: str | None = None
    source: str = ""
    metadata: dict[str, Any] | None = None
    time: float | None = None


def prepare_documents(docs: list[DocumentInput], chunking: ChunkSettings) -> list[NewDocument]:
    prepared = []
    for doc in docs:
        metadata = doc.metadata or {}
        meta_json = json.dumps(metadata, ensure_ascii=False, sort_keys=True)
        digest = content_hash(doc.title, doc.text, meta_json)
        chunks = chunk_text(doc.text, chunking.max_words, chunking.overlap_words, chunking.max_chars_cjk,
                            chunking.overlap_chars_cjk, chunking.max_chars) or ([doc.title] if doc.title else [])
        prepared.append(NewDocument(
            key=doc.id or digest[:16], title=doc.title, text=doc.text, chunks=chunks, content_hash=digest,
            source=doc.source, metadata=metadata, time=doc.time,
        ))
    return prepared


class PartitionIndexer:
    """Keeps one partition's index in step with the store. All builds for a partition run one at a time."""

    def __init__(self, partition: Partition, folder: Path, store: Store, encoders: EncoderSet,
                 tokenizer: BM25Tokenizer, params: IndexSettings, ingest_batch: int):
        self.partition = partition  # refreshed by the library after each write (its version, time range, language)
        self.folder = folder
        self.store = store
        self.encoders = encoders
        self.tokenizer = tokenizer
        self.params = params
        self.ingest_batch = ingest_batch
        self.snapshot: PartitionSnapshot | None = None
        self._lock = asyncio.Lock()

    @property
    def batcher(self) -> MicroBatcher:
        """The encoder of the partition's language (a language still `auto` has no chunks yet: multi's)."""
        return self.encoders.for_language(self.partition.language)

    @property
    def indexed_version(self) -> int:
        return self.snapshot.store_version if self.snapshot is not None else -1

    def open(self) -> None:
        """Load the current version from disk (no encoding); `catch_up` then closes any gap with the store."""
        folder = current_version(self.folder)
        if folder is not None:
            self.snapshot = PartitionSnapshot(folder, self.params.expansion_search)
            collect_garbage(self.folder)

    @property
    def other_encoder(self) -> bool:
        """The current version was built by another encoder (the setting or the partition's language changed): its
        vectors cannot be searched with this one's, whatever the versions say."""
        return self.snapshot is not None and self.snapshot.encoder != self.batcher.encoder.name

    @property
    def built_otherwise(self) -> bool:
        """The current version was built by another encoder or for another language than the partition's now (a
        re-index stopped before its build: zh and multi share an encoder but not their fusion weights)."""
        return self.other_encoder or (self.snapshot is not None
                                      and self.snapshot.language not in ("", self.partition.language))

    @property
    def needs_recoding(self) -> bool:
        """The current version's token vectors are int8 where the settings now store them compressed."""
        return self.snapshot is not None and needs_recoding(self.snapshot, self.params)

    async def catch_up(self, version: int | None = None, rebuild: bool = False, recode: bool = False) -> int:
        """Make the index reflect the store at `version` or later; returns the version now indexed. `recode`: also
        re-code int8 token vectors into the configured codec (a build from the current version: no text is
        encoded again)."""
        def covered() -> bool:
            return (version is not None and self.indexed_version >= version
                    and not (rebuild or recode or self.built_otherwise))

        if covered():
            return self.indexed_version
        async with self._lock:
            if covered():
                return self.indexed_version  # another caller's build already covered this one
            await self._build(rebuild, recode)
            return self.indexed_version

    async def _build(self, rebuild: bool, recode: bool = False) -> None:
        loop = asyncio.get_running_loop()
        started = time.perf_counter()
        # one encoder and language for the whole build: a re-index may change the partition's meanwhile
        batcher, language = self.batcher, self.partition.language
        encoder = batcher.encoder
        previous = None if rebuild else self.snapshot
        if previous is not None and previous.encoder != encoder.name:
            previous = None  # built by another encoder: everything is encoded again
        if self.snapshot is not None and (self.snapshot.encoder, self.snapshot.language) != (encoder.name, language):
            # the same documents retrieve differently now: a new version, so that no answer cached on the old one
            # (its key names the versions) is served again
            version = await _finished(loop.run_in_executor(None, self.store.advance_version, self.partition.id))
            self.partition = replace(self.partition, version=version)
        have = np.asarray(previous.chunk_ids, dtype=np.int64) if previous is not None else np.zeros(0, np.int64)
        store_version, chunk_ids, rows = await _finished(loop.run_in_executor(
            None, self.store.partition_state, self.partition.id, have.tolist()))
        removed = np.setdiff1d(have, np.asarray(chunk_ids, dtype=np.int64), assume_unique=True)
        unchanged = previous is not None and not len(removed) and not rows and previous.store_version == store_version
        if unchanged and not (recode and needs_recoding(previous, self.params)):
            return
        added = await self._encode(batcher, rows) if rows else NewChunks.empty(encoder.dim,
                                                                                encoder.has_token_vectors)
        self.snapshot = await _finished(loop.run_in_executor(
            None, build_version, self.folder, self.partition.id, store_version, encoder.name, encoder.dim, previous,
            removed, added, self.params, self.tokenizer.many, language, recode))
        log.info("partition %s/%s: index v%d (+%d -%d chunks, %d in all) in %.0f ms", self.partition.tenant,
                 self.partition.name, store_version, len(rows), len(removed), self.snapshot.size,
                 (time.perf_counter() - started) * 1000)

    async def _encode(self, batcher: MicroBatcher, rows: list[ChunkRow]) -> NewChunks:
        encoder = batcher.encoder
        texts = [r.text for r in rows]
        inputs = [f"{r.title}. {r.text}" if r.title else r.text for r in rows]
        dense = np.zeros((len(rows), encoder.dim), np.float32)
        tokens: list[np.ndarray] | None = [None] * len(rows) if encoder.has_token_vectors else None  # type: ignore
        # Shortest first: a batch pads to its longest text, so similar lengths waste less.
        order = sorted(range(len(rows)), key=lambda i: len(inputs[i]))
        for start in range(0, len(order), self.ingest_batch):
            part = order[start:start + self.ingest_batch]
            encoded = await batcher.encode_many([inputs[i] for i in part])
            dense[part] = encoded.dense
            if tokens is not None and encoded.tokens is not None:
                for i, vectors in zip(part, encoded.tokens):
                    tokens[i] = vectors
        docs = [{"key": r.doc_key, "title": r.title, "source": r.source, "metadata": r.metadata, "file": r.file}
                for r in rows]
        return NewChunks(
            chunk_ids=np.asarray([r.id for r in rows], np.int64), ordinals=np.asarray([r.ordinal for r in rows],
                                                                                      np.int32),
            texts=texts, docs=docs, dense=dense, tokens=tokens, places=[r.place for r in rows],
        )


async def _finished(step: asyncio.Future):
    """A worker thread's step of a build, awaited so that cancelling the build (a shutdown) still waits for the step:
    the thread cannot be stopped, and the store and the data folder's lock must outlive what it writes."""
    try:
        return await asyncio.shield(step)
    except asyncio.CancelledError:
        await asyncio.wait([step])
        raise
