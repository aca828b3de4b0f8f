"""Durable store: SQLite (WAL) holding partitions, documents, chunks and the ingest journal."""
from .records import ChunkRow, DocumentStatus, NewDocument, Partition, StoredDocument, TenantUsage, WriteResult
from .sqlite import Store

__all__ = ["ChunkRow", "DocumentStatus", "NewDocument", "Partition", "Store", "StoredDocument", "TenantUsage",
           "WriteResult"]
