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
from typing import Callable, Iterable, Iterator

from . import journal as feed
from .records import (ChunkRow, DocumentStatus, FileDocument, JournalChange, NewDocument, Partition, StoredDocument,
                      TenantUsage, WriteResult)
from .schema import create_or_migrate, file_of, file_values, partition_of, place_of, place_values, transaction



class Store:
    """SQLite store. Thread-safe: one writer connection behind a lock, one reader connection per thread."""

    def __init__(self, path: str | Path):
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._write_lock = threading.Lock()
        self._local = threading.local()
        self._writer = self._connect()
        create_or_migrate(self._writer)

    def _connect(self) -> sqlite3.Connection:
        conn = sqlite3.connect(self.path, check_same_thread=False, isolation_level=None, timeout=30)
        conn.execute("PRAGMA journal_mode=WAL")
        conn.execute("PRAGMA synchronous=FULL")
        conn.execute("PRAGMA foreign_keys=ON")
        conn.row_factory = sqlite3.Row
        return conn

    def _reader(self) -> sqlite3.Connection:
        conn = getattr(self._local, "conn", None)
        if conn is None:
            conn = self._local.conn = self._connect()
        return conn

    def close(self) -> None:
        with self._write_lock:
            self._writer.close()

    # -- partitions ---------------------------------------------------------------------------------------------

    def ensure_partition(self, tenant: str, name: str, kind: str = "default", language: str = "auto") -> Partition:
        now = time.time()
        with self._write_lock:
            self._writer.execute(
                "INSERT OR IGNORE INTO partitions (tenant, name, kind, language, created_at, updated_at)"
                " VALUES (?,?,?,?,?,?)", (tenant, name, kind, language, now, now),
            )
        found = self.get_partition(tenant, name)
        assert found is not None
        return found

    def set_language(self, partition_id: int, language: str) -> None:
        """A partition's language (its encoder): set once it is decided, or by a re-index to another one."""
        with self._write_lock:
            self._writer.execute("UPDATE partitions SET language = ?, updated_at = ? WHERE id = ?",
                                 (language, time.time(), partition_id))

    def set_dense_weight(self, partition_id: int, weight: float | None) -> None:
        """The vector list's weight in the partition's hybrid fusion (None: its language's default); its settings
        version goes up."""
        with self._write_lock:
            self._writer.execute("UPDATE partitions SET dense_weight = ?, settings_version = settings_version + 1,"
                                 " updated_at = ? WHERE id = ?", (weight, time.time(), partition_id))

    def advance_version(self, partition_id: int) -> int:
        """A new version of the partition with the same documents (its encoder or language changed: what was
        retrieved, and the answers cached on it, differ); returns it."""
        with self._write_lock, transaction(self._writer) as db:
            db.execute("UPDATE partitions SET version = version + 1, updated_at = ? WHERE id = ?",
                       (time.time(), partition_id))
            return db.execute("SELECT version FROM partitions WHERE id = ?", (partition_id,)).fetchone()[0]

    def sample_texts(self, partition_id: int, limit: int = 50) -> list[str]:
        """The texts of a partition's first chunks (what language detection reads of a store from before it)."""
        rows = self._reader().execute(
            "SELECT text FROM chunks WHERE partition_id = ? ORDER BY id LIMIT ?", (partition_id, limit)).fetchall()
        return [r[0] for r in rows]

    def get_partition(self, tenant: str, name: str) -> Partition | None:
        row = self._reader().execute(
            "SELECT * FROM partitions WHERE tenant = ? AND name = ?", (tenant, name)
        ).fetchone()
        return partition_of(row) if row else None

    def partition_by_id(self, partition_id: int) -> Partition | None:
        row = self._reader().execute("SELECT * FROM partitions WHERE id = ?", (partition_id,)).fetchone()
        return partition_of(row) if row else None

    def partitions(self, tenant: str | None = None) -> list[Partition]:
        if tenant is None:
            rows = self._reader().execute("SELECT * FROM partitions ORDER BY id").fetchall()
        else:
            rows = self._reader().execute(
                "SELECT * FROM partitions WHERE tenant = ? ORDER BY id", (tenant,)
            ).fetchall()
        return [partition_of(r) for r in rows]

    # -- writes -------------------------------------------------------------------------------------------------

    def upsert_documents(self, partition_id: int, documents: Iterable[NewDocument],
                         origin: str | None = None) -> WriteResult:
        """Insert or replace documents in one transaction. Same content hash again changes nothing. `origin`: the
        store (of another box) a replicated write came from, journalled so that it is not sent back there."""
        now = time.time()
        seq = 0
        statuses: list[DocumentStatus] = []
        with self._write_lock, transaction(self._writer) as db:
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
                        " created_at, updated_at, text_bytes, file_name, file_sha256, file_format, file_size,"
                        " file_pages, parser_version, file_ocr_pages) VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?)",
                        (partition_id, doc.key, doc.source, doc.title, doc.content_hash, metadata, doc_time, now, now,
                         doc.text_bytes, *file_values(doc.file)),
                    ).lastrowid
                    op = "created"
                else:
                    doc_id = row["id"]
                    db.execute("DELETE FROM chunks WHERE document_id = ?", (doc_id,))
                    db.execute(
                        "UPDATE documents SET source=?, title=?, content_hash=?, metadata=?, time=?, updated_at=?,"
                        " text_bytes=?, file_name=?, file_sha256=?, file_format=?, file_size=?, file_pages=?,"
                        " parser_version=?, file_ocr_pages=? WHERE id = ?",
                        (doc.source, doc.title, doc.content_hash, metadata, doc_time, now, doc.text_bytes,
                         *file_values(doc.file), doc_id),
                    )
                    op = "updated"
                _insert_chunks(db, doc_id, partition_id, doc)
                seq = db.execute(
                    "INSERT INTO journal (partition_id, version, op, doc_key, at, origin) VALUES (?,?,?,?,?,?)",
                    (partition_id, new_version, op, doc.key, now, origin),
                ).lastrowid
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
        return WriteResult(partition_id=partition_id, version=new_version, documents=statuses, seq=seq)

    def delete_documents(self, partition_id: int, keys: Iterable[str], origin: str | None = None) -> WriteResult:
        now = time.time()
        seq = 0
        statuses: list[DocumentStatus] = []
        with self._write_lock, transaction(self._writer) as db:
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
                seq = db.execute(
                    "INSERT INTO journal (partition_id, version, op, doc_key, at, origin) VALUES (?,?,?,?,?,?)",
                    (partition_id, version + 1, "deleted", key, now, origin),
                ).lastrowid
                statuses.append(DocumentStatus(key, "deleted", 0))
            if any(s.status == "deleted" for s in statuses):
                version += 1
                db.execute("UPDATE partitions SET version = ?, updated_at = ? WHERE id = ?", (version, now, partition_id))
        return WriteResult(partition_id=partition_id, version=version, documents=statuses, seq=seq)

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
        with transaction(db, "BEGIN"):
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
                "SELECT c.id, c.ordinal, c.text, c.page, c.page_end, c.section, d.doc_key, d.title, d.source,"
                " d.metadata, d.time, d.file_name FROM chunks c JOIN documents d ON d.id = c.document_id"
                f" WHERE c.id IN ({marks}) ORDER BY c.id",
                part,
            )
            for r in rows:
                yield ChunkRow(
                    id=r["id"], doc_key=r["doc_key"], ordinal=r["ordinal"], text=r["text"], title=r["title"],
                    source=r["source"], metadata=json.loads(r["metadata"]), time=r["time"], place=place_of(r),
                    file=r["file_name"] or "",
                )

    def document_keys(self, tenant: str, key: str) -> list[Partition]:
        """The tenant's partitions that hold a document with this key."""
        rows = self._reader().execute(
            "SELECT p.* FROM partitions p JOIN documents d ON d.partition_id = p.id"
            " WHERE p.tenant = ? AND d.doc_key = ? ORDER BY p.id",
            (tenant, key),
        ).fetchall()
        return [partition_of(r) for r in rows]

    def tenant_usage(self, tenant: str) -> TenantUsage:
        """The tenant's partitions, documents, stored text bytes and kept files' bytes (what quotas limit)."""
        db = self._reader()
        with transaction(db, "BEGIN"):  # one snapshot: the four agree
            partitions = db.execute("SELECT COUNT(*) FROM partitions WHERE tenant = ?", (tenant,)).fetchone()[0]
            documents, text_bytes = db.execute(
                "SELECT COUNT(d.id), COALESCE(SUM(d.text_bytes), 0) FROM documents d"
                " JOIN partitions p ON p.id = d.partition_id WHERE p.tenant = ?", (tenant,)).fetchone()
            file_bytes = db.execute(  # one blob per sha256, however many of its documents refer to it
                "SELECT COALESCE(SUM(size), 0) FROM (SELECT MAX(d.file_size) AS size FROM documents d"
                " JOIN partitions p ON p.id = d.partition_id WHERE p.tenant = ? AND d.file_sha256 IS NOT NULL"
                " GROUP BY d.file_sha256)", (tenant,)).fetchone()[0]
        return TenantUsage(partitions, documents, text_bytes, file_bytes)

    def tenant_file_references(self, tenant: str, hashes: Iterable[str]) -> dict[str, int]:
        """Of the `hashes` (sha256 of original files), those the tenant's documents refer to, with how many do."""
        hashes, held = sorted(set(hashes)), {}
        for start in range(0, len(hashes), 500):
            part = hashes[start:start + 500]
            held.update(self._reader().execute(
                "SELECT d.file_sha256, COUNT(*) FROM documents d JOIN partitions p ON p.id = d.partition_id"
                f" WHERE p.tenant = ? AND d.file_sha256 IN ({','.join('?' * len(part))}) GROUP BY d.file_sha256",
                (tenant, *part)).fetchall())
        return held

    def stored_documents(self, partition_id: int, keys: Iterable[str]) -> dict[str, StoredDocument]:
        """Those of `keys` the partition already holds."""
        keys = sorted(set(keys))
        found: dict[str, StoredDocument] = {}
        for start in range(0, len(keys), 500):
            part = keys[start:start + 500]
            rows = self._reader().execute(
                f"SELECT doc_key, content_hash, text_bytes, file_sha256, file_size FROM documents"
                f" WHERE partition_id = ? AND doc_key IN ({','.join('?' * len(part))})", (partition_id, *part))
            found.update((r["doc_key"], StoredDocument(r["content_hash"], r["text_bytes"], r["file_sha256"],
                                                       r["file_size"] or 0)) for r in rows)
        return found

    def count_documents(self, partition_id: int) -> int:
        return self._reader().execute(
            "SELECT COUNT(*) FROM documents WHERE partition_id = ?", (partition_id,)
        ).fetchone()[0]

    def file_documents(self, partition_id: int, keys: Iterable[str] | None = None) -> list[FileDocument]:
        """The partition's documents that came from files (all, or those of `keys`), by key."""
        partition = self.partition_by_id(partition_id)
        query = ("SELECT doc_key, title, source, metadata, time, file_name, file_sha256, file_format, file_size,"
                 " file_pages, parser_version, file_ocr_pages FROM documents"
                 " WHERE partition_id = ? AND file_sha256 IS NOT NULL")
        if keys is None:
            rows = self._reader().execute(query + " ORDER BY doc_key", (partition_id,)).fetchall()
        else:
            wanted, rows = sorted(set(keys)), []
            for start in range(0, len(wanted), 500):
                part = wanted[start:start + 500]
                rows += self._reader().execute(query + f" AND doc_key IN ({','.join('?' * len(part))})",
                                               (partition_id, *part)).fetchall()
        return [FileDocument(partition, r["doc_key"], r["title"], r["source"], json.loads(r["metadata"]), r["time"],
                             file_of(r)) for r in rows]

    def list_documents(self, partition_id: int, after: str = "", limit: int = 100) -> list[FileDocument]:
        """The partition's documents in id order, from the first id after `after` (a page of `limit`)."""
        partition = self.partition_by_id(partition_id)
        rows = self._reader().execute(
            "SELECT doc_key, title, source, metadata, time, file_name, file_sha256, file_format, file_size,"
            " file_pages, parser_version, file_ocr_pages FROM documents WHERE partition_id = ? AND doc_key > ?"
            " ORDER BY doc_key LIMIT ?", (partition_id, after, limit)).fetchall()
        return [FileDocument(partition, r["doc_key"], r["title"], r["source"], json.loads(r["metadata"]), r["time"],
                             file_of(r)) for r in rows]

    def forget_hashes(self, partition_id: int, keys: Iterable[str]) -> None:
        """Make the next write of these documents count as a change (parsing the same bytes again on purpose)."""
        with self._write_lock, transaction(self._writer) as db:
            db.executemany("UPDATE documents SET content_hash = '' WHERE partition_id = ? AND doc_key = ?",
                           [(partition_id, key) for key in keys])

    def file_referenced(self, sha256: str) -> bool:
        """Whether any document still refers to these file bytes."""
        return self._reader().execute(
            "SELECT 1 FROM documents WHERE file_sha256 = ? LIMIT 1", (sha256,)).fetchone() is not None

    def journal(self, partition_id: int, limit: int = 100) -> list[dict]:
        rows = self._reader().execute(
            "SELECT seq, version, op, doc_key, at FROM journal WHERE partition_id = ? ORDER BY seq DESC LIMIT ?",
            (partition_id, limit),
        ).fetchall()
        return [dict(r) for r in rows]

    # -- the journal as a change feed for the site's other boxes (journal.py) ----------------------------------

    def changes_after(self, after: int, peer_store: str, wanted: Callable[[str], bool], limit: int = 200,
                      max_chars: int = 1_000_000) -> tuple[list[JournalChange], int, bool]:
        return feed.changes_after(self._reader(), after, peer_store, wanted, limit, max_chars)

    def pending_by_tenant(self, after: int, peer_store: str) -> dict[str, int]:
        return feed.pending_by_tenant(self._reader(), after, peer_store)

    def journal_head(self) -> int:
        return feed.journal_head(self._reader())

    def peer_cursor(self, peer: str) -> tuple[str | None, int]:
        return feed.peer_cursor(self._reader(), peer)

    def set_peer_cursor(self, peer: str, store_id: str, seq: int) -> None:
        with self._write_lock:
            feed.set_peer_cursor(self._writer, peer, store_id, seq)

    @property
    def store_id(self) -> str:
        with self._write_lock:
            return feed.store_id(self._writer)


def _insert_chunks(db: sqlite3.Connection, doc_id: int, partition_id: int, doc: NewDocument) -> None:
    places = doc.places or (None,) * len(doc.chunks)
    db.executemany(
        "INSERT INTO chunks (document_id, partition_id, ordinal, text, page, page_end, section) VALUES (?,?,?,?,?,?,?)",
        [(doc_id, partition_id, i, text, *place_values(place)) for i, (text, place) in enumerate(zip(doc.chunks, places))],
    )
