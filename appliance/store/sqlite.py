"""The durable truth: partitions, documents, chunks and the ingest journal in one SQLite file (WAL mode).

A write is one transaction committed with synchronous=FULL before it is acknowledged, so an acknowledged ingest
survives kill -9 and power loss. Indexes are derived from what is here and can always be rebuilt from it.
Readers use their own connection per thread; WAL lets them read while the single writer commits.
"""
from __future__ import annotations

import json
import sqlite3
import threading
import time
from pathlib import Path
from typing import Iterable, Iterator

from .records import ChunkRow, DocumentStatus, NewDocument, Partition, StoredDocument, TenantUsage, WriteResult

_SCHEMA = """
CREATE TABLE IF NOT EXISTS partitions (
    id INTEGER PRIMARY KEY,
    tenant TEXT NOT NULL,
    name TEXT NOT NULL,
    kind TEXT NOT NULL DEFAULT 'default',
    version INTEGER NOT NULL DEFAULT 0,
    min_time REAL,
    max_time REAL,
    created_at REAL NOT NULL,
    updated_at REAL NOT NULL,
    UNIQUE (tenant, name)
);
CREATE TABLE IF NOT EXISTS documents (
    id INTEGER PRIMARY KEY,
    partition_id INTEGER NOT NULL REFERENCES partitions(id),
    doc_key TEXT NOT NULL,
    source TEXT NOT NULL DEFAULT '',
    title TEXT NOT NULL DEFAULT '',
    content_hash TEXT NOT NULL,
    metadata TEXT NOT NULL DEFAULT '{}',
    time REAL NOT NULL,
    created_at REAL NOT NULL,
    updated_at REAL NOT NULL,
    text_bytes INTEGER NOT NULL DEFAULT 0,  -- its chunks' UTF-8 bytes: what quotas count, without reading them
    UNIQUE (partition_id, doc_key)
);
CREATE TABLE IF NOT EXISTS chunks (
    id INTEGER PRIMARY KEY AUTOINCREMENT,  -- never reused: chunk ids are index keys
    document_id INTEGER NOT NULL REFERENCES documents(id) ON DELETE CASCADE,
    partition_id INTEGER NOT NULL,
    ordinal INTEGER NOT NULL,
    text TEXT NOT NULL
);
CREATE INDEX IF NOT EXISTS chunks_by_partition ON chunks(partition_id);
CREATE INDEX IF NOT EXISTS chunks_by_document ON chunks(document_id);
CREATE TABLE IF NOT EXISTS journal (
    seq INTEGER PRIMARY KEY AUTOINCREMENT,
    partition_id INTEGER NOT NULL,
    version INTEGER NOT NULL,
    op TEXT NOT NULL,
    doc_key TEXT NOT NULL,
    at REAL NOT NULL
);
"""


class Store:
    """SQLite store. Thread-safe: one writer connection behind a lock, one reader connection per thread."""

    def __init__(self, path: str | Path):
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._write_lock = threading.Lock()
        self._local = threading.local()
        self._writer = self._connect()
        self._writer.executescript(_SCHEMA)
        self._add_text_bytes()

    def _connect(self) -> sqlite3.Connection:
        conn = sqlite3.connect(self.path, check_same_thread=False, isolation_level=None, timeout=30)
        conn.execute("PRAGMA journal_mode=WAL")
        conn.execute("PRAGMA synchronous=FULL")
        conn.execute("PRAGMA foreign_keys=ON")
        conn.row_factory = sqlite3.Row
        return conn

    def _add_text_bytes(self) -> None:
        """A store made before documents.text_bytes existed gets it, counted once from its chunks."""
        columns = {row["name"] for row in self._writer.execute("PRAGMA table_info(documents)")}
        if "text_bytes" in columns:
            return
        with _transaction(self._writer) as db:
            db.execute("ALTER TABLE documents ADD COLUMN text_bytes INTEGER NOT NULL DEFAULT 0")
            db.execute("UPDATE documents SET text_bytes = (SELECT COALESCE(SUM(LENGTH(CAST(c.text AS BLOB))), 0)"
                       " FROM chunks c WHERE c.document_id = documents.id)")

    def _reader(self) -> sqlite3.Connection:
        conn = getattr(self._local, "conn", None)
        if conn is None:
            conn = self._local.conn = self._connect()
        return conn

    def close(self) -> None:
        with self._write_lock:
            self._writer.close()

    # -- partitions ---------------------------------------------------------------------------------------------

    def ensure_partition(self, tenant: str, name: str, kind: str = "default") -> Partition:
        now = time.time()
        with self._write_lock:
            self._writer.execute(
                "INSERT OR IGNORE INTO partitions (tenant, name, kind, created_at, updated_at) VALUES (?,?,?,?,?)",
                (tenant, name, kind, now, now),
            )
        found = self.get_partition(tenant, name)
        assert found is not None
        return found

    def get_partition(self, tenant: str, name: str) -> Partition | None:
        row = self._reader().execute(
            "SELECT * FROM partitions WHERE tenant = ? AND name = ?", (tenant, name)
        ).fetchone()
        return _partition(row) if row else None

    def partition_by_id(self, partition_id: int) -> Partition | None:
        row = self._reader().execute("SELECT * FROM partitions WHERE id = ?", (partition_id,)).fetchone()
        return _partition(row) if row else None

    def partitions(self, tenant: str | None = None) -> list[Partition]:
        if tenant is None:
            rows = self._reader().execute("SELECT * FROM partitions ORDER BY id").fetchall()
        else:
            rows = self._reader().execute(
                "SELECT * FROM partitions WHERE tenant = ? ORDER BY id", (tenant,)
            ).fetchall()
        return [_partition(r) for r in rows]

    # -- writes -------------------------------------------------------------------------------------------------

    def upsert_documents(self, partition_id: int, documents: Iterable[NewDocument]) -> WriteResult:
        """Insert or replace documents in one transaction. Same content hash again changes nothing."""
        now = time.time()
        statuses: list[DocumentStatus] = []
        with self._write_lock, _transaction(self._writer) as db:
            version = db.execute("SELECT version FROM partitions WHERE id = ?", (partition_id,)).fetchone()[0]
            new_version = version + 1
            times: list[float] = []
            for doc in documents:
                row = db.execute(
                    "SELECT id, content_hash FROM documents WHERE partition_id = ? AND doc_key = ?",
                    (partition_id, doc.key),
                ).fetchone()
                if row is not None and row["content_hash"] == doc.content_hash:
                    statuses.append(DocumentStatus(doc.key, "unchanged", len(doc.chunks)))
                    continue
                doc_time = doc.time if doc.time is not None else now
                times.append(doc_time)
                metadata = json.dumps(doc.metadata, ensure_ascii=False, sort_keys=True)
                if row is None:
                    doc_id = db.execute(
                        "INSERT INTO documents (partition_id, doc_key, source, title, content_hash, metadata, time,"
                        " created_at, updated_at, text_bytes) VALUES (?,?,?,?,?,?,?,?,?,?)",
                        (partition_id, doc.key, doc.source, doc.title, doc.content_hash, metadata, doc_time, now, now,
                         doc.text_bytes),
                    ).lastrowid
                    op = "created"
                else:
                    doc_id = row["id"]
                    db.execute("DELETE FROM chunks WHERE document_id = ?", (doc_id,))
                    db.execute(
                        "UPDATE documents SET source=?, title=?, content_hash=?, metadata=?, time=?, updated_at=?,"
                        " text_bytes=? WHERE id = ?",
                        (doc.source, doc.title, doc.content_hash, metadata, doc_time, now, doc.text_bytes, doc_id),
                    )
                    op = "updated"
                db.executemany(
                    "INSERT INTO chunks (document_id, partition_id, ordinal, text) VALUES (?,?,?,?)",
                    [(doc_id, partition_id, i, text) for i, text in enumerate(doc.chunks)],
                )
                db.execute(
                    "INSERT INTO journal (partition_id, version, op, doc_key, at) VALUES (?,?,?,?,?)",
                    (partition_id, new_version, op, doc.key, now),
                )
                statuses.append(DocumentStatus(doc.key, op, len(doc.chunks)))
            if times:
                db.execute(
                    "UPDATE partitions SET version = ?, updated_at = ?,"
                    " min_time = MIN(COALESCE(min_time, ?), ?), max_time = MAX(COALESCE(max_time, ?), ?)"
                    " WHERE id = ?",
                    (new_version, now, min(times), min(times), max(times), max(times), partition_id),
                )
            else:
                new_version = version
        return WriteResult(partition_id=partition_id, version=new_version, documents=statuses)

    def delete_documents(self, partition_id: int, keys: Iterable[str]) -> WriteResult:
        now = time.time()
        statuses: list[DocumentStatus] = []
        with self._write_lock, _transaction(self._writer) as db:
            version = db.execute("SELECT version FROM partitions WHERE id = ?", (partition_id,)).fetchone()[0]
            for key in keys:
                row = db.execute(
                    "SELECT id FROM documents WHERE partition_id = ? AND doc_key = ?", (partition_id, key)
                ).fetchone()
                if row is None:
                    statuses.append(DocumentStatus(key, "not_found", 0))
                    continue
                db.execute("DELETE FROM chunks WHERE document_id = ?", (row["id"],))
                db.execute("DELETE FROM documents WHERE id = ?", (row["id"],))
                db.execute(
                    "INSERT INTO journal (partition_id, version, op, doc_key, at) VALUES (?,?,?,?,?)",
                    (partition_id, version + 1, "deleted", key, now),
                )
                statuses.append(DocumentStatus(key, "deleted", 0))
            if any(s.status == "deleted" for s in statuses):
                version += 1
                db.execute("UPDATE partitions SET version = ?, updated_at = ? WHERE id = ?", (version, now, partition_id))
        return WriteResult(partition_id=partition_id, version=version, documents=statuses)

    # -- reads --------------------------------------------------------------------------------------------------

    def chunk_ids(self, partition_id: int) -> list[int]:
        rows = self._reader().execute(
            "SELECT id FROM chunks WHERE partition_id = ? ORDER BY id", (partition_id,)
        ).fetchall()
        return [r[0] for r in rows]

    def partition_state(self, partition_id: int,
                        indexed: Iterable[int] = ()) -> tuple[int, list[int], list[ChunkRow]]:
        """The partition's version, its chunk ids, and the rows of those chunks not in `indexed`, all read in one
        snapshot so they agree even while writers commit."""
        db = self._reader()
        with _transaction(db, "BEGIN"):
            version = db.execute("SELECT version FROM partitions WHERE id = ?", (partition_id,)).fetchone()[0]
            ids = [r[0] for r in db.execute(
                "SELECT id FROM chunks WHERE partition_id = ? ORDER BY id", (partition_id,))]
            known = set(indexed)
            rows = list(self.chunks([i for i in ids if i not in known]))
        return version, ids, rows

    def chunks(self, chunk_ids: Iterable[int]) -> Iterator[ChunkRow]:
        """Chunks with their document's fields, in id order. Missing ids are skipped."""
        ids = sorted(set(chunk_ids))
        db = self._reader()
        for start in range(0, len(ids), 500):
            part = ids[start:start + 500]
            marks = ",".join("?" * len(part))
            rows = db.execute(
                "SELECT c.id, c.ordinal, c.text, d.doc_key, d.title, d.source, d.metadata, d.time"
                f" FROM chunks c JOIN documents d ON d.id = c.document_id WHERE c.id IN ({marks}) ORDER BY c.id",
                part,
            )
            for r in rows:
                yield ChunkRow(
                    id=r["id"], doc_key=r["doc_key"], ordinal=r["ordinal"], text=r["text"], title=r["title"],
                    source=r["source"], metadata=json.loads(r["metadata"]), time=r["time"],
                )

    def document_keys(self, tenant: str, key: str) -> list[Partition]:
        """The tenant's partitions that hold a document with this key."""
        rows = self._reader().execute(
            "SELECT p.* FROM partitions p JOIN documents d ON d.partition_id = p.id"
            " WHERE p.tenant = ? AND d.doc_key = ? ORDER BY p.id",
            (tenant, key),
        ).fetchall()
        return [_partition(r) for r in rows]

    def tenant_usage(self, tenant: str) -> TenantUsage:
        """The tenant's partitions, documents and stored text bytes (what quotas limit)."""
        db = self._reader()
        with _transaction(db, "BEGIN"):  # one snapshot: the three agree
            partitions = db.execute("SELECT COUNT(*) FROM partitions WHERE tenant = ?", (tenant,)).fetchone()[0]
            documents, text_bytes = db.execute(
                "SELECT COUNT(d.id), COALESCE(SUM(d.text_bytes), 0) FROM documents d"
                " JOIN partitions p ON p.id = d.partition_id WHERE p.tenant = ?", (tenant,)).fetchone()
        return TenantUsage(partitions, documents, text_bytes)

    def stored_documents(self, partition_id: int, keys: Iterable[str]) -> dict[str, StoredDocument]:
        """Those of `keys` the partition already holds."""
        keys = sorted(set(keys))
        found: dict[str, StoredDocument] = {}
        for start in range(0, len(keys), 500):
            part = keys[start:start + 500]
            rows = self._reader().execute(
                f"SELECT doc_key, content_hash, text_bytes FROM documents WHERE partition_id = ?"
                f" AND doc_key IN ({','.join('?' * len(part))})", (partition_id, *part))
            found.update((r["doc_key"], StoredDocument(r["content_hash"], r["text_bytes"])) for r in rows)
        return found

    def count_documents(self, partition_id: int) -> int:
        return self._reader().execute(
            "SELECT COUNT(*) FROM documents WHERE partition_id = ?", (partition_id,)
        ).fetchone()[0]

    def journal(self, partition_id: int, limit: int = 100) -> list[dict]:
        rows = self._reader().execute(
            "SELECT seq, version, op, doc_key, at FROM journal WHERE partition_id = ? ORDER BY seq DESC LIMIT ?",
            (partition_id, limit),
        ).fetchall()
        return [dict(r) for r in rows]


class _transaction:
    """BEGIN IMMEDIATE ... COMMIT, rolled back on any exception, a failed COMMIT included (autocommit connections).

    A COMMIT that fails (busy, I/O error) can leave the transaction open, and then every later BEGIN on the
    connection fails; a full disk makes SQLite roll back by itself, and a second ROLLBACK would then raise "no
    transaction is active" in place of the real error. So: roll back whatever is still open, once.
    """

    def __init__(self, conn: sqlite3.Connection, begin: str = "BEGIN IMMEDIATE"):
        self.conn, self.begin = conn, begin

    def __enter__(self) -> sqlite3.Connection:
        self.conn.execute(self.begin)
        return self.conn

    def __exit__(self, exc_type, exc, tb) -> None:
        try:
            if exc_type is None:
                self.conn.execute("COMMIT")
        finally:
            if self.conn.in_transaction:
                self.conn.execute("ROLLBACK")


def _partition(row: sqlite3.Row) -> Partition:
    return Partition(
        id=row["id"], tenant=row["tenant"], name=row["name"], kind=row["kind"], version=row["version"],
        min_time=row["min_time"], max_time=row["max_time"],
    )
