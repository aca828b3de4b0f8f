"""The journal read as a change feed, for another box holding the same tenants (appliance/cluster/).

Every write adds one journal entry per document it changed, in the same transaction, so the journal is a durable
outbox with nothing else to keep: a peer asks for the entries after the last one it applied and gets each
document's state as stored now. Applying that state is idempotent (the same content hash changes nothing), so a
feed read twice, or an entry whose document changed again since, ends in the same documents on both boxes.
"""
from __future__ import annotations

import json
import sqlite3
import time
from collections.abc import Callable

from .records import JournalChange, NewDocument
from .schema import file_of, place_of

_ENTRIES = """
SELECT j.seq, j.op, j.doc_key, j.partition_id, p.tenant, p.name, p.kind, p.language
FROM journal j JOIN partitions p ON p.id = j.partition_id
WHERE j.seq > ? AND (j.origin IS NULL OR j.origin != ?) ORDER BY j.seq LIMIT ?
"""


def changes_after(db: sqlite3.Connection, after: int, peer_store: str, wanted: Callable[[str], bool], limit: int,
                  max_chars: int) -> tuple[list[JournalChange], int, bool]:
    """Entries after `after` that did not come from the store `peer_store`, for the tenants `wanted` says it holds, with their
    documents; the last entry looked at (the peer's next `after`, past entries it does not hold too); and whether
    there may be more. Stops at `limit` entries or about `max_chars` of chunk text."""
    changes: list[JournalChange] = []
    last, chars = after, 0
    with _snapshot(db):
        rows = db.execute(_ENTRIES, (after, peer_store, limit)).fetchall()
        for row in rows:
            if chars >= max_chars:
                return changes, last, True
            last = row["seq"]
            if not wanted(row["tenant"]):
                continue
            document = None if row["op"] == "deleted" else _document(db, row["partition_id"], row["doc_key"])
            chars += sum(len(c) for c in document.chunks) if document else 0
            changes.append(JournalChange(row["seq"], row["op"], row["tenant"], row["name"], row["kind"],
                                         row["language"], row["doc_key"], document))
    return changes, last, len(rows) == limit


def pending_by_tenant(db: sqlite3.Connection, after: int, peer_store: str) -> dict[str, int]:
    """Entries after `after` that did not come from the store `peer_store`, counted per tenant: what that peer
    has yet to apply."""
    rows = db.execute(
        "SELECT p.tenant, COUNT(*) FROM journal j JOIN partitions p ON p.id = j.partition_id"
        " WHERE j.seq > ? AND (j.origin IS NULL OR j.origin != ?) GROUP BY p.tenant", (after, peer_store)).fetchall()
    return {tenant: count for tenant, count in rows}


def journal_head(db: sqlite3.Connection) -> int:
    return db.execute("SELECT COALESCE(MAX(seq), 0) FROM journal").fetchone()[0]


def peer_cursor(db: sqlite3.Connection, peer: str) -> tuple[str | None, int]:
    """(the peer's store the cursor is in, the last entry of it applied here); (None, 0) before any."""
    row = db.execute("SELECT store_id, seq FROM peer_cursors WHERE peer = ?", (peer,)).fetchone()
    return (row[0], row[1]) if row else (None, 0)


def set_peer_cursor(db: sqlite3.Connection, peer: str, store_id: str, seq: int) -> None:
    """Forward only within one store of the peer; a new store of it (a new disk, a restore) starts over."""
    db.execute("INSERT INTO peer_cursors (peer, store_id, seq, at) VALUES (?,?,?,?) ON CONFLICT (peer) DO UPDATE"
               " SET seq = CASE WHEN store_id = excluded.store_id THEN MAX(seq, excluded.seq) ELSE excluded.seq END,"
               " store_id = excluded.store_id, at = excluded.at", (peer, store_id, seq, time.time()))


def store_id(db: sqlite3.Connection) -> str:
    """This store's identity, made at its first open: what its writes are journalled as on the other boxes."""
    db.execute("INSERT OR IGNORE INTO meta (key, value) VALUES ('store_id', lower(hex(randomblob(16))))")
    return db.execute("SELECT value FROM meta WHERE key = 'store_id'").fetchone()[0]


def forget_store_id(db: sqlite3.Connection) -> None:
    """A copy restored elsewhere is another store: its next open makes a new identity, so the boxes of a site
    send it again what the copy lacks (the writes journalled as from the old one included)."""
    db.execute("DELETE FROM meta WHERE key = 'store_id'")


def _document(db: sqlite3.Connection, partition_id: int, key: str) -> NewDocument | None:
    """The document as stored now (None: deleted since; a later entry says so)."""
    doc = db.execute("SELECT * FROM documents WHERE partition_id = ? AND doc_key = ?", (partition_id, key)).fetchone()
    if doc is None:
        return None
    chunks = db.execute("SELECT text, page, page_end, section FROM chunks WHERE document_id = ? ORDER BY ordinal",
                        (doc["id"],)).fetchall()
    places = tuple(place_of(c) for c in chunks)
    return NewDocument(key=key, title=doc["title"], text="", chunks=[c["text"] for c in chunks],
                       content_hash=doc["content_hash"], source=doc["source"], metadata=json.loads(doc["metadata"]),
                       time=doc["time"], places=places if any(p.page or p.section for p in places) else (),
                       file=file_of(doc))


class _snapshot:
    """One read transaction, so the entries and the documents they name agree while writers commit."""

    def __init__(self, db: sqlite3.Connection):
        self.db = db

    def __enter__(self) -> None:
        self.db.execute("BEGIN")

    def __exit__(self, *exc) -> None:
        self.db.execute("ROLLBACK")
