"""Writes over HTTP on a real server (real SQLite, real indexes): a delete whose index build failed says so, an
ingest waits for its index at most `server.ingest_wait_timeout_s`, and per-tenant quotas refuse what would pass
them with a clear 413, storing nothing of the refused request."""
from __future__ import annotations

import threading
import time

import appliance.library.ingest as ingest
from support import LiveServer, make_settings


def _doc(key: str, text: str | None = None) -> dict:
    return {"id": key, "text": text or f"Document {key} explains how the {key} pump valve is serviced."}


def _disk_full(*args, **kwargs):
    raise OSError(28, "No space left on device")


def test_a_delete_whose_index_build_failed_answers_202_with_the_error(tmp_path, models_dir, monkeypatch):
    with LiveServer(make_settings(tmp_path, models_dir)) as live, live.client() as c:
        stored = c.post("/v1/documents", json={"tenant": "t", "partition": "p", "documents": [_doc("d1"), _doc("d2")]})
        assert stored.status_code == 200
        monkeypatch.setattr(ingest, "build_version", _disk_full)  # the injected fault
        failed = c.delete("/v1/documents/d1", params={"tenant": "t"})
        monkeypatch.undo()
        done = c.delete("/v1/documents/d2", params={"tenant": "t"})  # the next write builds what is missing
    assert failed.status_code == 202, failed.text
    body = failed.json()
    assert "No space left" in body["index_error"]
    assert body["deleted"] == [{"partition": "p", "version": 2, "indexed": False, "index_error": body["index_error"]}]
    assert done.status_code == 200 and done.json()["deleted"] == [{"partition": "p", "version": 3, "indexed": True}]


def test_an_ingest_waits_for_its_index_at_most_the_configured_time(tmp_path, models_dir, monkeypatch):
    real, release = ingest.build_version, threading.Event()

    def slow_build(*args, **kwargs):
        release.wait(20)
        return real(*args, **kwargs)

    settings = make_settings(tmp_path, models_dir, server_ingest_wait_timeout_s="1")
    with LiveServer(settings) as live, live.client() as c:
        monkeypatch.setattr(ingest, "build_version", slow_build)
        started = time.perf_counter()
        reply = c.post("/v1/documents", json={"tenant": "t", "partition": "p", "documents": [_doc("d1")]})
        waited = time.perf_counter() - started
        release.set()
        deadline = time.time() + 30
        while time.time() < deadline and not c.post("/v1/search", json={"tenant": "t", "query": "pump"}).json()[
                "results"]:
            time.sleep(0.2)
        found = c.post("/v1/search", json={"tenant": "t", "query": "pump valve"}).json()["results"]
    assert reply.status_code == 202 and reply.json()["indexed"] is False and "index_error" not in reply.json()
    assert [d["status"] for d in reply.json()["documents"]] == ["created"], "stored before the answer"
    assert 1 <= waited < 10
    assert [r["document_id"] for r in found] == ["d1"], "indexing went on after the answer"


def test_quotas_refuse_with_413_and_store_nothing(tmp_path, models_dir):
    settings = make_settings(tmp_path, models_dir, quota_max_documents="3", quota_max_partitions="2",
                             quota_max_text_bytes="2000")
    with LiveServer(settings) as live, live.client() as c:
        def post(partition: str, *docs: dict, tenant: str = "acme"):
            return c.post("/v1/documents", json={"tenant": tenant, "partition": partition, "documents": list(docs)})

        assert post("a", _doc("d1"), _doc("d2")).status_code == 200
        assert post("b", _doc("d3")).status_code == 200  # 2 partitions, 3 documents
        refused = {"partitions": post("c", _doc("d9")), "documents": post("a", _doc("d4"), _doc("d1")),
                   "text_bytes": post("b", _doc("d3", "pump " * 500))}
        replaced = post("a", _doc("d1", "Document d1 now says the valve is replaced yearly."))
        other = post("c", _doc("d9"), _doc("d8"), _doc("d7"), tenant="other")  # another tenant's own quota
        partitions = {p["name"] for p in c.get("/v1/partitions", params={"tenant": "acme"}).json()["partitions"]}
        hits = c.post("/v1/search", json={"tenant": "acme", "query": "pump valve serviced", "k": 10}).json()
        assert c.delete("/v1/documents/d2", params={"tenant": "acme"}).status_code == 200
        after_delete = post("a", _doc("d4"))
    for limit, reply in refused.items():
        assert reply.status_code == 413, reply.text
        error = reply.json()["error"]
        assert error["code"] == "quota_exceeded" and f"quota.max_{limit}" in error["message"], error
    assert replaced.status_code == 200 and other.status_code == 200, "replacing a document does not grow the count"
    assert partitions == {"a", "b"}, "a refused request creates no partition"
    assert {r["document_id"] for r in hits["results"]} == {"d1", "d2", "d3"}
    assert all("pump pump" not in r["text"] for r in hits["results"]), "a refused replacement changes nothing"
    assert after_delete.status_code == 200, "a delete frees its share"
