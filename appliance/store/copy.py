"""A consistent copy of the store while it is in use: SQLite's online backup (pages copied under a read
transaction, so writers carry on), and what the copy refers to."""
from __future__ import annotations

import sqlite3
from pathlib import Path

from .journal import forget_store_id


def copy_database(source: Path, dest: Path) -> None:
    """Copy the SQLite database at `source` (WAL and all) into a new file `dest`, as of one moment."""
    src = sqlite3.connect(source, timeout=30)
    try:
        out = sqlite3.connect(dest)
        try:
            src.backup(out, pages=4096)  # in steps: a writer waits at most one step's worth
            out.execute("PRAGMA journal_mode=WAL")
            if out.execute("SELECT 1 FROM sqlite_master WHERE name = 'meta'").fetchone():
                forget_store_id(out)
                out.commit()
        finally:
            out.close()
    finally:
        src.close()


def copied_contents(database: Path) -> tuple[int, int, set[str]]:
    """(partitions, documents, sha256 of the original files its documents refer to) of a copied database."""
    conn = sqlite3.connect(f"file:{database}?mode=ro", uri=True)
    try:
        partitions = conn.execute("SELECT count(*) FROM partitions").fetchone()[0]
        documents = conn.execute("SELECT count(*) FROM documents").fetchone()[0]
        blobs = {row[0] for row in conn.execute("SELECT DISTINCT file_sha256 FROM documents "
                                                "WHERE file_sha256 IS NOT NULL")}
    finally:
        conn.close()
    return partitions, documents, blobs
