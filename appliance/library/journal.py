"""What replication between boxes reads and keeps of this box's store (`Library.journal`): the write journal, paged
for a peer, and each peer's cursor (how far this box applied that peer's journal). Writes themselves go through the
Library's `write` and `delete` like any other; this is the bookkeeping around them."""
from __future__ import annotations

from collections.abc import Callable

from ..store import JournalChange, Store


class ReplicationJournal:
    def __init__(self, store: Store):
        self._store = store

    @property
    def store_id(self) -> str:
        """This store's id: a peer counts its place in this journal per store (a new disk or a restore is another)."""
        return self._store.store_id

    def head(self) -> int:
        return self._store.journal_head()

    def changes_after(self, after: int, peer_store: str, wanted: Callable[[str], bool],
                      limit: int) -> tuple[list[JournalChange], int, bool]:
        """Up to `limit` entries after `after` for the tenants `wanted` admits, less those journalled as from
        `peer_store`; with the last seq read and whether more follow."""
        return self._store.changes_after(after, peer_store, wanted, limit)

    def pending_by_tenant(self, after: int, peer_store: str) -> dict[str, int]:
        return self._store.pending_by_tenant(after, peer_store)

    def peer_cursor(self, peer: str) -> tuple[str | None, int]:
        """The peer's store id and the last seq of it applied here ((None, 0) before the first)."""
        return self._store.peer_cursor(peer)

    def set_peer_cursor(self, peer: str, store_id: str, seq: int) -> None:
        self._store.set_peer_cursor(peer, store_id, seq)

    def tenant_documents(self, tenant: str) -> int:
        return self._store.tenant_usage(tenant).documents
