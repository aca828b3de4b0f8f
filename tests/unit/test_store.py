import sqlite3
import threading

import pytest

from appliance.store import NewDocument, Store


def doc(key: str, text: str, chunks: list[str] | None = None, **kw) -> NewDocument:
    return NewDocument(key=key, title=kw.pop("title", key), text=text, chunks=chunks or [text],
                       content_hash=f"h-{key}-{text}", **kw)


def test_store_uses_wal_and_full_sync(tmp_path):
    store = Store(tmp_path / "s.sqlite3")
    mode = store._writer.execute("PRAGMA journal_mode").fetchone()[0]
    sync = store._writer.execute("PRAGMA synchronous").fetchone()[0]
    assert mode == "wal" and sync == 2  # FULL


def test_upsert_is_idempotent_by_content_hash(tmp_path):
    store = Store(tmp_path / "s.sqlite3")
    p = store.ensure_partition("t", "p")
    first = store.upsert_documents(p.id, [doc("a", "alpha", ["a1", "a2"]), doc("b", "beta")])
    assert [d.status for d in first.documents] == ["created", "created"] and first.version == 1
    again = store.upsert_documents(p.id, [doc("a", "alpha", ["a1", "a2"])])
    assert [d.status for d in again.documents] == ["unchanged"] and again.version == 1
    ids_before = store.chunk_ids(p.id)
    changed = store.upsert_documents(p.id, [doc("a", "alpha v2", ["new"])])
    assert changed.documents[0].status == "updated" and changed.version == 2
    ids_after = store.chunk_ids(p.id)
    # the changed document's chunks were replaced (new ids, never reused); the other document's kept
    assert len(ids_after) == 2 and max(ids_after) > max(ids_before)
    texts = {c.text for c in store.chunks(ids_after)}
    assert texts == {"new", "beta"}


def test_delete_removes_document_and_chunks(tmp_path):
    store = Store(tmp_path / "s.sqlite3")
    p = store.ensure_partition("t", "p")
    store.upsert_documents(p.id, [doc("a", "alpha"), doc("b", "beta")])
    result = store.delete_documents(p.id, ["a", "zzz"])
    assert [d.status for d in result.documents] == ["deleted", "not_found"]
    assert {c.doc_key for c in store.chunks(store.chunk_ids(p.id))} == {"b"}
    assert store.partition_by_id(p.id).version == 2
    assert [j["op"] for j in store.journal(p.id)] == ["deleted", "created", "created"]


def test_failed_transaction_leaves_nothing_behind(tmp_path):
    store = Store(tmp_path / "s.sqlite3")
    p = store.ensure_partition("t", "p")
    store.upsert_documents(p.id, [doc("a", "alpha")])

    bad = [doc("b", "beta"), NewDocument(key="c", title="c", text="x", chunks=["x"], content_hash=None)]  # NOT NULL
    try:
        store.upsert_documents(p.id, bad)
    except sqlite3.IntegrityError:
        pass
    else:
        raise AssertionError("expected the insert to fail")
    assert store.count_documents(p.id) == 1 and store.partition_by_id(p.id).version == 1


def test_partitions_are_per_tenant_with_time_range(tmp_path):
    store = Store(tmp_path / "s.sqlite3")
    a = store.ensure_partition("t1", "news", kind="news")
    b = store.ensure_partition("t2", "news")
    assert a.id != b.id
    store.upsert_documents(a.id, [doc("x", "one", time=100.0), doc("y", "two", time=300.0)])
    got = store.get_partition("t1", "news")
    assert (got.kind, got.min_time, got.max_time) == ("news", 100.0, 300.0)
    assert [p.name for p in store.partitions("t2")] == ["news"]
    assert [p.tenant for p in store.document_keys("t1", "x")] == ["t1"]
    assert store.document_keys("t2", "x") == []


def test_readers_in_threads_see_committed_state(tmp_path):
    store = Store(tmp_path / "s.sqlite3")
    p = store.ensure_partition("t", "p")
    store.upsert_documents(p.id, [doc("a", "alpha")])
    seen = []
    thread = threading.Thread(target=lambda: seen.append(store.partition_state(p.id)))
    thread.start()
    thread.join()
    version, ids, rows = seen[0]
    assert version == 1 and len(ids) == 1 and [r.text for r in rows] == ["alpha"]
    assert store.partition_state(p.id, indexed=ids)[2] == []  # nothing new beyond what is indexed


class CommitFailsOnce:
    """The writer connection, except that its next COMMIT fails as a busy or failing disk would make it, leaving
    the transaction open."""

    def __init__(self, conn: sqlite3.Connection):
        self._conn, self.failed = conn, False

    def execute(self, sql: str, *args):
        if sql == "COMMIT" and not self.failed:
            self.failed = True
            raise sqlite3.OperationalError("disk I/O error")
        return self._conn.execute(sql, *args)

    def __getattr__(self, name: str):
        return getattr(self._conn, name)


def test_a_failed_commit_is_rolled_back_and_the_next_write_works(tmp_path):
    store = Store(tmp_path / "s.sqlite3")
    p = store.ensure_partition("t", "p")
    store.upsert_documents(p.id, [doc("a", "alpha")])
    store._writer = CommitFailsOnce(store._writer)
    with pytest.raises(sqlite3.OperationalError, match="I/O"):
        store.upsert_documents(p.id, [doc("b", "beta")])
    assert store.count_documents(p.id) == 1  # not acknowledged, not stored
    written = store.upsert_documents(p.id, [doc("c", "gamma")])  # before the fix: "within a transaction"
    assert written.version == 2 and [d.status for d in written.documents] == ["created"]
    assert {c.doc_key for c in store.chunks(store.chunk_ids(p.id))} == {"a", "c"}
    reopened = Store(tmp_path / "s.sqlite3")
    assert reopened.count_documents(p.id) == 2 and reopened.partition_by_id(p.id).version == 2


def test_tenant_usage_counts_partitions_documents_and_text_bytes_also_in_an_older_store(tmp_path):
    from appliance.store import StoredDocument, TenantUsage

    path = tmp_path / "s.sqlite3"
    store = Store(path)
    p, q = store.ensure_partition("t", "p"), store.ensure_partition("t", "q")
    store.ensure_partition("u", "p")
    store.upsert_documents(p.id, [doc("a", "alpha", ["é1", "a2"]), doc("b", "beta")])
    store.upsert_documents(q.id, [doc("c", "gamma")])
    usage = TenantUsage(partitions=2, documents=3, text_bytes=5 + 4 + 5)  # UTF-8 bytes: "é" is two
    assert store.tenant_usage("t") == usage and store.tenant_usage("u") == TenantUsage(1, 0, 0)
    assert store.stored_documents(p.id, ["a", "zz"]) == {"a": StoredDocument("h-a-alpha", 5)}
    store.close()
    with sqlite3.connect(path) as db:  # as a store written before the column existed
        db.execute("ALTER TABLE documents DROP COLUMN text_bytes")
    assert Store(path).tenant_usage("t") == usage, "counted from the chunks when the column is added"


def test_chunk_places_and_source_files_are_kept_and_an_older_store_gains_their_columns(tmp_path):
    from appliance.store import Place, SourceFile

    path = tmp_path / "s.sqlite3"
    store = Store(path)
    p = store.ensure_partition("t", "p")
    source = SourceFile("report.pdf", "ab" * 32, "pdf", 1234, 3, 1, (2, 3))  # pages 2 and 3 read by OCR
    filed = NewDocument(key="report.pdf", title="Report", text="one two", chunks=["one", "two"], content_hash="h",
                        places=(Place(1, None, ("Intro",)), Place(2, 3, ("Results", "Tables"))), file=source)
    store.upsert_documents(p.id, [filed, doc("plain", "just text")])
    rows = {(c.doc_key, c.text): c for c in store.chunks(store.chunk_ids(p.id))}
    assert rows[("report.pdf", "two")].place == Place(2, 3, ("Results", "Tables"))
    assert rows[("report.pdf", "one")].file == "report.pdf" and rows[("plain", "just text")].place == Place()
    assert [d.file for d in store.file_documents(p.id)] == [source]
    assert store.file_referenced("ab" * 32) and not store.file_referenced("cd" * 32)
    assert [d.key for d in store.list_documents(p.id, after="", limit=1)] == ["plain"]
    assert [d.key for d in store.list_documents(p.id, after="plain")] == ["report.pdf"]
    store.close()
    with sqlite3.connect(path) as db:  # as a store written before files and places existed
        db.execute("DROP INDEX documents_by_file")
        for table, column in (("documents", "file_name"), ("documents", "file_sha256"), ("documents", "file_format"),
                              ("documents", "file_size"), ("documents", "file_pages"),
                              ("documents", "parser_version"), ("documents", "file_ocr_pages"),
                              ("chunks", "page"), ("chunks", "page_end"),
                              ("chunks", "section")):
            db.execute(f"ALTER TABLE {table} DROP COLUMN {column}")
    reopened = Store(path)
    assert {c.place for c in reopened.chunks(reopened.chunk_ids(p.id))} == {Place()}
    assert reopened.file_documents(p.id) == [] and reopened.count_documents(p.id) == 2


def test_a_partitions_own_dense_weight_is_kept_and_an_older_store_gains_its_column(tmp_path):
    path = tmp_path / "s.sqlite3"
    store = Store(path)
    p = store.ensure_partition("t", "p")
    assert store.get_partition("t", "p").dense_weight is None  # its language's
    store.set_dense_weight(p.id, 0.25)
    assert store.partition_by_id(p.id).dense_weight == 0.25
    store.set_dense_weight(p.id, None)
    assert store.get_partition("t", "p").dense_weight is None
    store.close()
    with sqlite3.connect(path) as db:  # as a store written before partitions had their own weight
        db.execute("ALTER TABLE partitions DROP COLUMN dense_weight")
    reopened = Store(path)
    assert reopened.get_partition("t", "p").dense_weight is None
    reopened.set_dense_weight(p.id, 2.0)
    assert [q.dense_weight for q in reopened.partitions()] == [2.0]
    reopened.close()
