"""Plain records that cross the store's boundary."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any


@dataclass(slots=True, frozen=True)
class Partition:
    id: int
    tenant: str
    name: str
    kind: str
    version: int
    min_time: float | None
    max_time: float | None
    language: str = "auto"  # en, zh or multi: picks its encoder; auto until its first documents decide it
    dense_weight: float | None = None  # the vector list's weight in its hybrid fusion; None: its language's default
    settings_version: int = 0  # goes up with each change of its own settings (answers cached under others differ)


@dataclass(slots=True, frozen=True)
class Place:
    """Where a chunk sits in its file: for citations ("report.pdf, p. 12, Methods")."""
    page: int | None = None
    page_end: int | None = None  # set when the chunk runs over a page break
    section: tuple[str, ...] = ()


@dataclass(slots=True, frozen=True)
class SourceFile:
    """The file a document was parsed from; its bytes are kept by sha256 in the blob folder."""
    name: str
    sha256: str
    format: str
    size: int
    pages: int | None = None
    parser_version: int = 0
    ocr_pages: tuple[int, ...] = ()  # pages (1-based) whose text was read from their image


@dataclass(slots=True, frozen=True)
class NewDocument:
    key: str
    title: str
    text: str
    chunks: list[str]
    content_hash: str
    source: str = ""
    metadata: dict[str, Any] = field(default_factory=dict)
    time: float | None = None
    places: tuple[Place, ...] = ()  # aligned with chunks; empty for a document that came as plain text
    file: SourceFile | None = None

    @property
    def text_bytes(self) -> int:
        """What the store keeps of its text: its chunks in UTF-8, overlaps included (what quotas count)."""
        return sum(len(chunk.encode("utf-8")) for chunk in self.chunks)


@dataclass(slots=True, frozen=True)
class StoredDocument:
    """What an ingest needs to know of a document already stored (to tell a new one from a replacement)."""
    content_hash: str
    text_bytes: int
    file_sha256: str | None = None  # the original file it keeps, if it came from one
    file_size: int = 0


@dataclass(slots=True, frozen=True)
class TenantUsage:
    partitions: int
    documents: int
    text_bytes: int
    file_bytes: int = 0  # its kept original files, each distinct sha256 once (the blob store keeps one copy)


@dataclass(slots=True, frozen=True)
class DocumentStatus:
    key: str
    status: str  # created, updated, unchanged, deleted, not_found
    chunks: int


@dataclass(slots=True, frozen=True)
class WriteResult:
    partition_id: int
    version: int
    documents: list[DocumentStatus]
    seq: int = 0  # the last journal entry this write added (0: it changed nothing)


@dataclass(slots=True, frozen=True)
class ChunkRow:
    id: int
    doc_key: str
    ordinal: int
    text: str
    title: str
    source: str
    metadata: dict[str, Any]
    time: float
    place: Place = Place()
    file: str = ""  # the name of the file the document was parsed from, "" for one sent as text


@dataclass(slots=True, frozen=True)
class FileDocument:
    """A stored document as listed (`file` is None for one sent as text); what `--sync`, re-parsing and downloads
    need."""
    partition: Partition
    key: str
    title: str
    source: str
    metadata: dict[str, Any]
    time: float
    file: SourceFile | None


@dataclass(slots=True, frozen=True)
class JournalChange:
    """One journal entry as a peer box applies it: what changed and, unless deleted, the document as stored now
    (None: deleted since, and a later entry says so)."""
    seq: int
    op: str  # created, updated, deleted
    tenant: str
    partition: str
    kind: str
    language: str
    key: str
    document: NewDocument | None
