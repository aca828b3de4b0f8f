"""Files in: bytes -> parser workers -> chunks that keep their page and heading path -> the library's write path.

Each file is answered on its own: a file that cannot be parsed (corrupt, encrypted, a scan, a zip bomb, past a
limit) gets its reason and stores nothing, while the other files of the same request are stored. The original
bytes are kept by content hash, so `reparse` can read them again with a newer parser and clients can download
them. A file whose bytes, parser version and fields are what the partition already holds is not parsed again.
"""
from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath
from typing import Any

from ..config import ChunkSettings
from ..parse import PARSER_VERSION, ParsedDocument, ParseError, ParseErrorCode, ParserPool, PoolStats
from ..store import FileDocument, NewDocument, Place, SourceFile
from ..paths import file_sha256
from ..store.blobs import sha256_of
from ..text import chunk_blocks, content_hash
from .records import IngestResult
from .service import Library

log = logging.getLogger("appliance.files")


@dataclass(slots=True, frozen=True)
class FileInput:
    name: str  # as the client named it; the document id unless `id` is given
    data: bytes | Path  # the bytes, or a file (an upload waiting in the spool) read only when a worker parses it
    id: str | None = None
    metadata: dict[str, Any] | None = None
    source: str = ""
    time: float | None = None
    sha256_known: str = ""  # of `data`, where the caller hashed it already (an upload, as it was spooled)

    @property
    def key(self) -> str:
        return self.id or self.name

    def size(self) -> int:
        return len(self.data) if isinstance(self.data, bytes) else self.data.stat().st_size

    def sha256(self) -> str:
        if self.sha256_known:
            return self.sha256_known
        return sha256_of(self.data) if isinstance(self.data, bytes) else file_sha256(self.data)


@dataclass(slots=True, frozen=True)
class FileError:
    code: str  # a ParseErrorCode value, or "duplicate_id"
    message: str


@dataclass(slots=True, frozen=True)
class FileOutcome:
    name: str
    id: str
    status: str | None = None  # created, updated, unchanged; None when the file failed
    chunks: int | None = None  # None: unchanged, not parsed again
    format: str | None = None
    pages: int | None = None
    sha256: str | None = None
    error: FileError | None = None
    ocr_pages: tuple[int, ...] = ()  # the pages whose text was read by OCR (kept with the file)


@dataclass(slots=True)
class FilesResult:
    tenant: str
    partition: str
    version: int
    indexed_version: int
    files: list[FileOutcome] = field(default_factory=list)
    index_error: str | None = None
    seq: int = 0  # the store journal's last entry for this write (0: nothing changed)

    @property
    def indexed(self) -> bool:
        return self.indexed_version >= self.version

    @property
    def stored(self) -> list[FileOutcome]:
        return [f for f in self.files if f.error is None]


class FileIngester:
    def __init__(self, library: Library, parser: ParserPool, chunking: ChunkSettings, max_file_bytes: int):
        self.library, self.parser, self.chunking, self.max_file_bytes = library, parser, chunking, max_file_bytes

    async def ingest(self, tenant: str, partition: str, files: list[FileInput], kind: str | None = None,
                     wait: bool = True, wait_timeout_s: float | None = None, *,
                     language: str | None = None, on_stored: Callable[[], None] | None = None) -> FilesResult:
        """Parse and store the files; one outcome per file, in order (`kind`, `language`: as `Library.ingest`;
        `on_stored`: as `Library.write`, called when something was stored)."""
        sizes = await asyncio.to_thread(lambda: [f.size() for f in files])
        outcomes = self._refused(files, sizes)
        digests = await asyncio.to_thread(lambda: [f.sha256() if i not in outcomes else "" for i, f in
                                                   enumerate(files)])  # up to 256 MiB: off the loop
        known = await asyncio.to_thread(self.library.stored_versions, tenant, partition, [f.key for f in files])
        for i, f in enumerate(files):
            stored = known.get(f.key)
            if i not in outcomes and stored is not None and stored[0] == _file_hash(f, digests[i]):
                doc = stored[1]
                outcomes[i] = FileOutcome(f.name, f.key, "unchanged", None, doc.file.format if doc else None,
                                          doc.file.pages if doc else None, digests[i],
                                          ocr_pages=doc.file.ocr_pages if doc else ())
        todo = [i for i in range(len(files)) if i not in outcomes]
        prepared: dict[int, NewDocument] = {}
        # the pool serves tenants in turn, so 100 slow files from one tenant delay another tenant's file by about one
        # job per worker; one request queues at most `workers` files, so a tenant's own requests take turns too
        turns = asyncio.Semaphore(self.parser.workers)
        parsed = await asyncio.gather(*(self._parse(tenant, files[i].data, turns) for i in todo))
        for i, result in zip(todo, parsed):
            if isinstance(result, ParseError):
                outcomes[i] = FileOutcome(files[i].name, files[i].key, error=FileError(result.code, result.message))
            else:
                prepared[i] = await asyncio.to_thread(self._prepare, files[i], digests[i], sizes[i], result)
        written = await self._write(tenant, partition, prepared, files, kind, wait, wait_timeout_s, language,
                                    on_stored)
        statuses = {d.key: d for d in written.documents}
        for i, doc in prepared.items():
            status = statuses[doc.key]
            outcomes[i] = FileOutcome(files[i].name, doc.key, status.status, status.chunks, doc.file.format,
                                      doc.file.pages, digests[i], ocr_pages=doc.file.ocr_pages)
        return FilesResult(tenant, partition, written.version, written.indexed_version,
                           [outcomes[i] for i in range(len(files))], written.index_error, written.seq)

    def _refused(self, files: list[FileInput], sizes: list[int]) -> dict[int, FileOutcome]:
        """Files refused before parsing: past the size limit, or an id already used in the request."""
        outcomes: dict[int, FileOutcome] = {}
        seen: set[str] = set()
        for i, f in enumerate(files):
            if f.key in seen:
                outcomes[i] = FileOutcome(f.name, f.key, error=FileError(
                    "duplicate_id", f"another file of this request already has the id {f.key!r}"))
            elif sizes[i] > self.max_file_bytes:
                outcomes[i] = FileOutcome(f.name, f.key, error=FileError(
                    ParseErrorCode.TOO_LARGE,
                    f"the file is larger than parse.max_file_bytes = {self.max_file_bytes} bytes"))
            seen.add(f.key)
        return outcomes

    async def _parse(self, tenant: str, data: bytes | Path, turns: asyncio.Semaphore) -> ParsedDocument | ParseError:
        async with turns:
            try:
                return await self.parser.parse(data, tenant)
            except ParseError as exc:
                return exc

    async def _write(self, tenant: str, partition: str, prepared: dict[int, NewDocument], files: list[FileInput],
                     kind: str | None, wait: bool, wait_timeout_s: float | None, language: str | None = None,
                     on_stored: Callable[[], None] | None = None) -> IngestResult:
        if prepared:
            blobs = {doc.file.sha256: files[i].data for i, doc in prepared.items()}
            return await self.library.write(tenant, partition, list(prepared.values()), kind, wait, wait_timeout_s,
                                            blobs, language=language, on_stored=on_stored)
        # nothing to store: the partition as it is (not created for a request whose every file failed)
        info = next((p for p in self.library.partitions(tenant) if p.name == partition), None)
        return IngestResult(tenant, partition, info.version if info else 0, info.indexed_version if info else 0)

    def _prepare(self, f: FileInput, digest: str, size: int, parsed: ParsedDocument) -> NewDocument:
        chunks = chunk_blocks(parsed.blocks, self.chunking)
        title = parsed.title or PurePosixPath(f.name).stem
        source = SourceFile(PurePosixPath(f.name).name, digest, str(parsed.format), size, parsed.pages,
                            PARSER_VERSION, parsed.ocr_pages)
        return NewDocument(
            key=f.key, title=title, text=parsed.text, chunks=[c.text for c in chunks] or [title],
            content_hash=_file_hash(f, digest), source=f.source, metadata=f.metadata or {}, time=f.time,
            places=tuple(Place(c.page, c.page_end, c.section) for c in chunks) or (Place(),), file=source)

    def parser_stats(self) -> PoolStats:
        return self.parser.stats()

    # -- stored files ------------------------------------------------------------------------------------------

    def stored_files(self, tenant: str, partition: str) -> list[FileDocument]:
        """The partition's documents that came from files (a store read: call from a worker thread)."""
        return self.library.file_documents(tenant, partition)

    def original(self, tenant: str, key: str, partition: str | None = None) -> tuple[FileDocument, bytes] | None:
        """A document's original file and its bytes (a store and disk read: call from a worker thread)."""
        found = self.original_file(tenant, key, partition)
        return None if found is None else (found[0], found[1].read_bytes())

    def original_file(self, tenant: str, key: str, partition: str | None = None) -> tuple[FileDocument, Path] | None:
        """A document of the tenant's that came from a file, and where its kept file is (a store read: call from
        a worker thread); None where the tenant has no such document."""
        return self.library.find_file(tenant, key, partition)

    async def reparse(self, tenant: str | None = None, partition: str | None = None,
                      force: bool = False) -> list[FilesResult]:
        """Parse again the kept files of documents an older parser read (all of them with `force`)."""
        results = []
        for owner, name in await asyncio.to_thread(self.library.stored_partitions, tenant):
            if partition is not None and name != partition:
                continue
            docs = await asyncio.to_thread(self.library.file_documents, owner, name)
            stale = [d for d in docs if force or d.file.parser_version < PARSER_VERSION]
            if not stale:
                continue
            inputs = [FileInput(d.file.name, await asyncio.to_thread(self.library.read_file, d.file.sha256),
                                id=d.key, metadata=d.metadata, source=d.source, time=d.time) for d in stale]
            if force:  # same bytes, same parser: the content hash would say "unchanged"
                await asyncio.to_thread(self.library.forget_hashes, owner, name, [d.key for d in stale])
            results.append(await self.ingest(owner, name, inputs))
            log.info("partition %s/%s: %d files parsed again", owner, name, len(stale))
        return results


def _file_hash(f: FileInput, digest: str) -> str:
    """What makes a file document the same: its bytes, the parser that read them, and the client's fields."""
    fields = json.dumps({"metadata": f.metadata or {}, "source": f.source, "time": f.time, "name": f.name},
                        ensure_ascii=False, sort_keys=True)
    return content_hash(f"file:{digest}", f"parser:{PARSER_VERSION}", fields)

