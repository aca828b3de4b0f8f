"""A tenant's `[quota]` limits, checked before a write stores anything."""
from __future__ import annotations

from collections import Counter

from ..config import QuotaSettings
from ..store import NewDocument, Partition, Store, StoredDocument


class QuotaExceeded(ValueError):
    """An ingest would take its tenant past a `[quota]` limit; nothing of it was stored."""

    def __init__(self, limit: str, message: str, field: str):
        super().__init__(message)
        self.limit, self.field = limit, field  # the setting's name (quota.<limit>); the request's part at fault


def check_quota(quota: QuotaSettings, store: Store, tenant: str, partition: Partition | None,
                prepared: list[NewDocument]) -> None:
    """Refuse a write that would take the tenant past a limit. Only growth counts: a replacement or an unchanged
    document adds no document, and a tenant over a lowered limit can still replace and delete."""
    usage = store.tenant_usage(tenant)
    if partition is None and quota.max_partitions and usage.partitions >= quota.max_partitions:
        raise QuotaExceeded("max_partitions", f"tenant {tenant!r} has {usage.partitions} partitions, as many as "
                            f"quota.max_partitions = {quota.max_partitions} allows: write into one of them",
                            "partition")
    latest = {doc.key: doc for doc in prepared}  # a repeated id: the last one is what stays
    stored = store.stored_documents(partition.id, latest) if partition is not None else {}
    added = sum(key not in stored for key in latest)
    grown = sum(doc.text_bytes - (stored[key].text_bytes if key in stored else 0) for key, doc in latest.items()
                if key not in stored or stored[key].content_hash != doc.content_hash)
    if quota.max_documents and added and usage.documents + added > quota.max_documents:
        raise QuotaExceeded("max_documents", f"tenant {tenant!r} stores {usage.documents} documents; {added} more "
                            f"would pass quota.max_documents = {quota.max_documents}", "documents")
    if quota.max_text_bytes and grown > 0 and usage.text_bytes + grown > quota.max_text_bytes:
        raise QuotaExceeded("max_text_bytes", f"tenant {tenant!r} stores {usage.text_bytes} bytes of text; "
                            f"{grown} more would pass quota.max_text_bytes = {quota.max_text_bytes}", "documents")
    if quota.max_file_bytes:
        replaced = [stored[key] for key in latest if key in stored]
        _check_file_bytes(quota.max_file_bytes, store, tenant, usage.file_bytes, list(latest.values()), replaced)


def _check_file_bytes(limit: int, store: Store, tenant: str, used: int, docs: list[NewDocument],
                      replaced: list[StoredDocument]) -> None:
    """Original files the tenant does not keep yet count once each (the blob store keeps one copy per sha256); a
    file it keeps already adds nothing. A file only the replaced documents keep is freed by this write, so a
    tenant at its limit can replace a file with one no larger."""
    sizes = {doc.file.sha256: doc.file.size for doc in docs if doc.file is not None}
    old = Counter(doc.file_sha256 for doc in replaced if doc.file_sha256 is not None)
    old_sizes = {doc.file_sha256: doc.file_size for doc in replaced if doc.file_sha256 is not None}
    references = store.tenant_file_references(tenant, [*sizes, *old]) if sizes or old else {}
    added = sum(size for sha, size in sizes.items() if sha not in references)
    freed = sum(old_sizes[sha] for sha, count in old.items() if sha not in sizes and references.get(sha, 0) <= count)
    if added and used - freed + added > limit:
        less = f" ({freed} freed by the documents it replaces)" if freed else ""
        raise QuotaExceeded("max_file_bytes", f"tenant {tenant!r} keeps {used} bytes of original files; "
                            f"{added} more{less} would pass quota.max_file_bytes = {limit}", "file")
