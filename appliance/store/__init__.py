"""Durable store: SQLite (WAL) holding partitions, documents, chunks and the ingest journal; original files by
content hash beside it."""
from .blobs import BlobStore
from .copy import copied_contents, copy_database
from .records import (ChunkRow, DocumentStatus, FileDocument, JournalChange, NewDocument, Partition, Place, SourceFile,
                      StoredDocument, TenantUsage, WriteResult)
from .sqlite import Store

__all__ = ["BlobStore", "ChunkRow", "DocumentStatus", "FileDocument", "JournalChange", "NewDocument", "Partition", "Place",
           "SourceFile", "Store", "StoredDocument", "TenantUsage", "WriteResult", "copied_contents", "copy_database"]
