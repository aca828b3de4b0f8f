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

    @property
    def text_bytes(self) -> int:
        """What the store keeps of its text: its chunks in UTF-8, overlaps included (what quotas count)."""
        return sum(len(chunk.encode("utf-8")) for chunk in self.chunks)


@dataclass(slots=True, frozen=True)
class StoredDocument:
    """What an ingest needs to know of a document already stored (to tell a new one from a replacement)."""
    content_hash: str
    text_bytes: int


@dataclass(slots=True, frozen=True)
class TenantUsage:
    partitions: int
    documents: int
    text_bytes: int


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
