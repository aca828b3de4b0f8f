"""What the library answers and refuses: a write's result, a partition as listed, the conflicts an ingest can meet."""
from __future__ import annotations

from dataclasses import dataclass, field

from ..store import DocumentStatus
from ..text import AUTO


class KindConflict(ValueError):
    """An ingest named a kind other than the one the existing partition has."""


class LanguageConflict(ValueError):
    """An ingest named a language other than the one the existing partition has (a re-index changes it)."""


@dataclass(slots=True)
class IngestResult:
    tenant: str
    partition: str
    version: int
    indexed_version: int
    documents: list[DocumentStatus] = field(default_factory=list)
    index_error: str | None = None  # the documents are stored; the index catches up on the next write or boot
    seq: int = 0  # the store journal's last entry for this write (0: nothing changed); what a peer box must apply

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
    language: str = AUTO  # en, zh, multi; auto until its first documents decide it
    encoder: str = ""  # what its current index version was built by ("" before any)
    dense_weight: float | None = None  # its own weight of the vector list in fusion (None: its language's)
    documents: int | None = None  # filled by `partition_details` only (a store read)
    index_bytes: int | None = None  # the searchable index version's files on disk (ditto)
