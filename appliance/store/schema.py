"""The store's tables, their migrations, and the small helpers every query uses."""
from __future__ import annotations

import json
import sqlite3

from .records import Partition, Place, SourceFile

_SCHEMA = """
CREATE TABLE IF NOT EXISTS partitions (
    id INTEGER PRIMARY KEY,
    tenant TEXT NOT NULL,
    name TEXT NOT NULL,
    kind TEXT NOT NULL DEFAULT 'default',
    version INTEGER NOT NULL DEFAULT 0,
    min_time REAL,
    max_time REAL,
    language TEXT NOT NULL DEFAULT 'auto',  -- en, zh, multi (its encoder); auto: decided by its first documents
    dense_weight REAL,  -- the vector list's weight in hybrid fusion; NULL: its language's (retrieve settings)
    settings_version INTEGER NOT NULL DEFAULT 0,  -- up by one with each change of its own settings
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
    file_name TEXT,  -- the rest: set when the document was parsed from a file (its bytes are in the blob folder)
    file_sha256 TEXT,
    file_format TEXT,
    file_size INTEGER,
    file_pages INTEGER,
    parser_version INTEGER,
    file_ocr_pages TEXT,  -- JSON list: the pages whose text was read by OCR; NULL: none (or parsed before OCR)
    UNIQUE (partition_id, doc_key)
);
CREATE TABLE IF NOT EXISTS chunks (
    id INTEGER PRIMARY KEY AUTOINCREMENT,  -- never reused: chunk ids are index keys
    document_id INTEGER NOT NULL REFERENCES documents(id) ON DELETE CASCADE,
    partition_id INTEGER NOT NULL,
    ordinal INTEGER NOT NULL,
    text TEXT NOT NULL,
    page INTEGER,
    page_end INTEGER,
    section TEXT  -- JSON list: the heading path
);
CREATE INDEX IF NOT EXISTS chunks_by_partition ON chunks(partition_id);
CREATE INDEX IF NOT EXISTS chunks_by_document ON chunks(document_id);
CREATE INDEX IF NOT EXISTS documents_by_file ON documents(file_sha256);
CREATE TABLE IF NOT EXISTS journal (
    seq INTEGER PRIMARY KEY AUTOINCREMENT,
    partition_id INTEGER NOT NULL,
    version INTEGER NOT NULL,
    op TEXT NOT NULL,
    doc_key TEXT NOT NULL,
    at REAL NOT NULL,
    origin TEXT  -- the store a replicated write came from (its store_id, appliance/cluster/); NULL: a client's
);
CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);  -- store_id: this store's identity
CREATE TABLE IF NOT EXISTS peer_cursors (
    peer TEXT PRIMARY KEY,  -- another box of the site
    store_id TEXT NOT NULL,  -- the store of that box the cursor is in (a new disk or a restore: a new store)
    seq INTEGER NOT NULL,  -- the last entry of its journal applied here
    at REAL NOT NULL
);
"""

# Columns added after the first release: (table, column, declaration, SQL that fills it in an older store)
_ADDED_COLUMNS = [
    # a store from before languages: its partitions are decided from their stored text at the next boot
    ("partitions", "language", "TEXT NOT NULL DEFAULT 'auto'", None),
    ("documents", "text_bytes", "INTEGER NOT NULL DEFAULT 0",
     "UPDATE documents SET text_bytes = (SELECT COALESCE(SUM(LENGTH(CAST(c.text AS BLOB))), 0)"
     " FROM chunks c WHERE c.document_id = documents.id)"),
    *(("documents", name, kind, None) for name, kind in (
        ("file_name", "TEXT"), ("file_sha256", "TEXT"), ("file_format", "TEXT"), ("file_size", "INTEGER"),
        ("file_pages", "INTEGER"), ("parser_version", "INTEGER"), ("file_ocr_pages", "TEXT"))),
    ("journal", "origin", "TEXT", None),
    ("partitions", "dense_weight", "REAL", None),
    ("partitions", "settings_version", "INTEGER NOT NULL DEFAULT 0", None),
    *(("chunks", name, kind, None) for name, kind in (("page", "INTEGER"), ("page_end", "INTEGER"),
                                                       ("section", "TEXT"))),
]


def create_or_migrate(conn: sqlite3.Connection) -> None:
    """Create the tables, or bring an older store's up to date (new columns, filled in one transaction)."""
    existing = {table: {row["name"] for row in conn.execute(f"PRAGMA table_info({table})")}
                for table in ("partitions", "documents", "chunks", "journal")}
    missing = [c for c in _ADDED_COLUMNS if existing[c[0]] and c[1] not in existing[c[0]]]
    if missing:
        with transaction(conn) as db:
            for table, column, declaration, fill in missing:
                db.execute(f"ALTER TABLE {table} ADD COLUMN {column} {declaration}")
                if fill:
                    db.execute(fill)
    conn.executescript(_SCHEMA)


class transaction:
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


def partition_of(row: sqlite3.Row) -> Partition:
    return Partition(
        id=row["id"], tenant=row["tenant"], name=row["name"], kind=row["kind"], version=row["version"],
        min_time=row["min_time"], max_time=row["max_time"], language=row["language"],
        dense_weight=row["dense_weight"], settings_version=row["settings_version"],
    )


def place_of(row: sqlite3.Row) -> Place:
    section = tuple(json.loads(row["section"])) if row["section"] else ()
    return Place(row["page"], row["page_end"], section)


def place_values(place: Place | None) -> tuple:
    if place is None:
        return None, None, None
    return place.page, place.page_end, json.dumps(list(place.section), ensure_ascii=False) if place.section else None


def file_of(row: sqlite3.Row) -> SourceFile | None:
    if row["file_sha256"] is None:
        return None
    ocr = tuple(json.loads(row["file_ocr_pages"])) if row["file_ocr_pages"] else ()
    return SourceFile(row["file_name"], row["file_sha256"], row["file_format"], row["file_size"], row["file_pages"],
                      row["parser_version"] or 0, ocr)


def file_values(file: SourceFile | None) -> tuple:
    if file is None:
        return None, None, None, None, None, None, None
    return (file.name, file.sha256, file.format, file.size, file.pages, file.parser_version,
            json.dumps(list(file.ocr_pages)) if file.ocr_pages else None)
