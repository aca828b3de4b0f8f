"""A partition re-indexed over HTTP on a running server (POST/GET /v1/partitions/{name}/reindex): another language
while it is searched, one re-index at a time on the box, hostile requests refused with nothing changed, another
tenant's partitions out of reach, a slow body timed out, and a server stopped mid-way finishing it at its next boot."""
from __future__ import annotations

import asyncio
import socket
import time
from concurrent.futures import ThreadPoolExecutor

import pytest

from appliance.evaluate import beir_documents
from appliance.ingest import DocumentInput
from appliance.reindexing import JobState
from appliance.wiring import open_services
from support import CMRC, SCIFACT, LiveServer, beir_slice, make_settings, run, write_keys

PAPERS = beir_slice(SCIFACT, queries=6, distractors=250)  # several hundred chunks: a re-index takes seconds


@pytest.fixture(scope="module")
def keyed(tmp_path_factory, models_dir):
    """One server with API keys: tenant alpha's English partition `papers`, beta's small `notes`."""
    folder = tmp_path_factory.mktemp("reindex")
    keys_file, keys = write_keys(folder, ["alpha", "beta"], admin=True)
    settings = make_settings(folder, models_dir, admission_keys_file=str(keys_file), server_body_timeout_s="5")
    with LiveServer(settings, api_key=keys["alpha"]) as live:
        live.keys = keys
        docs = [{"id": d.id, "title": d.title, "text": d.text} for d in beir_documents(PAPERS.corpus)]
        with live.client() as c:
            assert c.post("/v1/documents", json={"partition": "papers", "documents": docs}).status_code == 200
        with live.client(keys["beta"]) as c:
            notes = [{"id": f"n{i}", "text": f"Note {i}: the pump restarts after a power cut."} for i in range(5)]
            assert c.post("/v1/documents", json={"partition": "notes", "documents": notes}).status_code == 200
        yield live


def _listed(live: LiveServer, key: str) -> dict[str, dict]:
    with live.client(key) as c:
        reply = c.get("/v1/partitions")
    assert reply.status_code == 200, reply.text
    return {p["name"]: p for p in reply.json()["partitions"]}


def _wait_done(live: LiveServer, name: str, key: str, timeout: float = 600) -> dict:
    deadline = time.time() + timeout
    with live.client(key) as c:
        while time.time() < deadline:
            state = c.get(f"/v1/partitions/{name}/reindex").json()
            if state["state"] != "running":
                return state
            time.sleep(0.2)
    raise TimeoutError(f"re-index of {name} still running")


def test_a_partition_reindexed_to_another_language_over_http_while_it_is_searched(keyed):
    alpha, beta = keyed.keys["alpha"], keyed.keys["beta"]
    before = _listed(keyed, alpha)["papers"]
    assert (before["language"], before["encoder"]) == ("en", "minilm")

    def post(_: int):
        with keyed.client() as c:
            return c.post("/v1/partitions/papers/reindex", json={"language": "multi"})

    with ThreadPoolExecutor(6) as pool:  # six at once: one starts, the others find it running
        replies = list(pool.map(post, range(6)))
    started = [r for r in replies if r.status_code == 202]
    refused = [r for r in replies if r.status_code == 409]
    assert len(started) == 1 and len(refused) == 5, [(r.status_code, r.text) for r in replies]
    job = started[0].json()
    assert (job["tenant"], job["partition"], job["state"], job["language"], job["tokens"]) == \
        ("alpha", "papers", "running", "multi", False)
    assert started[0].headers["location"] == "/v1/partitions/papers/reindex" and job["result"] is None
    for reply in refused:
        error = reply.json()["error"]
        assert error["code"] == "reindex_running" and "'papers'" in error["message"], reply.text
        assert reply.headers["retry-after"]
    with keyed.client(beta) as c:  # another tenant is told one is running, not whose or which
        theirs = c.post("/v1/partitions/notes/reindex", json={})
    assert theirs.status_code == 409 and theirs.json()["error"]["code"] == "reindex_running"
    assert "another tenant" in theirs.json()["error"]["message"] and "papers" not in theirs.text
    assert "alpha" not in theirs.text

    searched = []  # the partition keeps answering from its previous version meanwhile
    with keyed.client() as c:
        while c.get("/v1/partitions/papers/reindex").json()["state"] == "running":
            query = list(PAPERS.queries.values())[len(searched) % len(PAPERS.queries)]
            reply = c.post("/v1/search", json={"query": query, "k": 5})
            searched.append((reply.status_code, len(reply.json().get("results", ()))))
            time.sleep(0.1)  # well inside the tenant's rate
    done = _wait_done(keyed, "papers", alpha)
    after = _listed(keyed, alpha)["papers"]
    with keyed.client() as c:
        found = c.post("/v1/search", json={"query": list(PAPERS.queries.values())[0], "k": 5}).json()

    took = done["ended_at"] - done["started_at"]
    print(f"\nsearched {len(searched)} times during the re-index of {before['chunks']} chunks ({took:.1f} s)")
    assert searched and all(status == 200 and hits == 5 for status, hits in searched), searched
    assert done["state"] == "done" and done["error"] is None and done["ended_at"] >= done["started_at"], done
    result = done["result"]
    assert (result["language"], result["encoder"], result["chunks"]) == ("multi", "use", before["chunks"])
    # another encoder: a new version, so answers cached on the old retrieval are not served again
    assert result["version"] == result["indexed_version"] == before["version"] + 1
    assert {k: after[k] for k in ("language", "encoder", "version", "chunks")} == \
        {k: result[k] for k in ("language", "encoder", "version", "chunks")}
    assert found["encoders"] == ["use"] and len(found["results"]) == 5
    assert _listed(keyed, beta)["notes"]["encoder"] == "minilm", "another tenant's partition is untouched"


@pytest.mark.parametrize("path, body, status, field", [
    ("/v1/partitions/papers/reindex", b"{", 400, None),
    ("/v1/partitions/papers/reindex", b"\xff\xfe", 400, None),
    ("/v1/partitions/papers/reindex", b"", 400, None),
    ("/v1/partitions/papers/reindex", b"[]", 422, "body"),
    ("/v1/partitions/papers/reindex", b'{"language": "klingon"}', 422, "language"),
    ("/v1/partitions/papers/reindex", b'{"language": 3}', 422, "language"),
    ("/v1/partitions/papers/reindex", b'{"language": ["zh"]}', 422, "language"),
    ("/v1/partitions/papers/reindex", b'{"tokens": "yes"}', 422, "tokens"),
    ("/v1/partitions/papers/reindex", b'{"tokens": true, "language": "zh"}', 422, "tokens"),
    ("/v1/partitions/papers/reindex", b'{"lang": "zh"}', 422, "lang"),
    ("/v1/partitions/papers/reindex", b'{"tenant": "beta"}', 403, "tenant"),
    ("/v1/partitions/papers/reindex", b'{"tenant": "../x"}', 422, "tenant"),
    ("/v1/partitions/papers/reindex", b'{"language": "zh", "x": "' + b"y" * 70_000 + b'"}', 413, None),
    ("/v1/partitions/nope/reindex", b"{}", 404, "name"),
    ("/v1/partitions/notes/reindex", b"{}", 404, "name"),  # beta's: alpha's key sees no such partition
    ("/v1/partitions/bad%20name/reindex", b"{}", 422, "name"),
])
def test_wrong_reindex_requests_are_refused_and_change_nothing(keyed, path, body, status, field):
    def seen() -> tuple:
        with keyed.client() as c:
            job = c.get("/v1/partitions/papers/reindex")
        return _listed(keyed, keyed.keys["alpha"]), _listed(keyed, keyed.keys["beta"]), job.status_code, job.text

    before = seen()
    with keyed.client() as c:
        reply = c.post(path, content=body, headers={"content-type": "application/json"})
    assert reply.status_code == status, reply.text
    error = reply.json()["error"]
    assert error.get("field") == field and error["message"], error
    assert seen() == before, "nothing changed and no re-index started"


def test_the_state_of_another_tenants_or_no_reindex_is_not_found(keyed):
    with keyed.client() as c:
        never = c.get("/v1/partitions/nope/reindex")
        theirs = c.get("/v1/partitions/notes/reindex", params={"tenant": "beta"})
        form = c.post("/v1/partitions/papers/reindex", content=b"language=zh",
                      headers={"content-type": "application/x-www-form-urlencoded"})
        delete = c.delete("/v1/partitions/papers/reindex")
    with keyed.client(keyed.keys["admin"]) as c:  # an admin names the tenant, as on a box without keys
        admin_view = c.get("/v1/partitions/notes/reindex", params={"tenant": "beta"})
        unnamed = c.get("/v1/partitions/notes/reindex")
    assert never.status_code == 404 and never.json()["error"]["field"] == "name"
    assert theirs.status_code == 403 and theirs.json()["error"]["field"] == "tenant"
    assert form.status_code == 415
    assert delete.status_code == 405 and set(delete.headers["allow"].split(", ")) >= {"GET", "POST"}
    assert admin_view.status_code == 404 and unnamed.status_code == 422, (admin_view.text, unnamed.text)


def test_a_slow_reindex_body_times_out_without_holding_up_others(keyed):
    head = (f"POST /v1/partitions/notes/reindex HTTP/1.1\r\nHost: 127.0.0.1\r\n"
            f"Authorization: Bearer {keyed.keys['beta']}\r\nContent-Type: application/json\r\n"
            f"Content-Length: 500\r\n\r\n{{").encode()
    with socket.create_connection(("127.0.0.1", keyed.port), timeout=60) as slow:
        slow.sendall(head)  # and never the rest
        with keyed.client() as c:  # another client meanwhile
            search = c.post("/v1/search", json={"query": "cancer cells", "k": 3})
        slow.setblocking(False)
        try:
            answered_first = slow.recv(64)
        except BlockingIOError:
            answered_first = b""
        slow.settimeout(60)
        status = int(slow.recv(64).split()[1])
    with keyed.client(keyed.keys["beta"]) as c:
        state = c.get("/v1/partitions/notes/reindex")
    assert search.status_code == 200 and answered_first == b"", "the search waited for the slow body's timeout"
    assert status == 408
    assert state.status_code == 404, "a body that never arrived started nothing"


def test_a_server_stopped_mid_reindex_finishes_it_at_its_next_boot(tmp_path, models_dir):
    docs = [DocumentInput(id=d.id, title=d.title, text=d.text)
            for d in beir_documents(beir_slice(SCIFACT, queries=3, distractors=200).corpus)]
    settings = make_settings(tmp_path, models_dir)

    async def go():
        async with open_services(settings, warm_up=False, generation=False) as services:
            await services.library.ingest("t", "kb", docs)
            before = services.library.partitions("t")[0]
            reindexer = services.reindexer
            reindexer.start("t", "kb", "multi")
            with pytest.raises(LookupError):
                reindexer.start("t", "nope")
            deadline = time.monotonic() + 120
            while services.library.store.get_partition("t", "kb").language != "multi":
                assert time.monotonic() < deadline and reindexer.job("t", "kb").state is JobState.RUNNING
                await asyncio.sleep(0.01)  # the new language is stored; its build is running
        stopped = reindexer.job("t", "kb")
        async with open_services(settings, warm_up=False, generation=False) as services:
            return before, stopped, services.library.partitions("t")[0]

    before, stopped, after = run(go())
    assert (before.language, before.encoder) == ("en", "minilm")
    assert stopped.state is JobState.FAILED and stopped.error == "the server stopped first", stopped
    assert (after.language, after.encoder, after.chunks) == ("multi", "use", before.chunks)
    # a new version (one more if the stopped build had already taken one)
    assert after.indexed_version == after.version > before.version


def test_a_language_change_stopped_before_its_build_is_built_at_the_next_boot(tmp_path, models_dir):
    """zh and multi share an encoder: a re-index between them stopped after storing the language but before its
    build left the version alone, and the next boot builds the partition for its language all the same."""
    docs = [DocumentInput(id=d.id, title=d.title, text=d.text)
            for d in beir_documents(beir_slice(CMRC, queries=3, distractors=20).corpus)]
    settings = make_settings(tmp_path, models_dir)

    async def go():
        async with open_services(settings, warm_up=False, generation=False) as services:
            await services.library.ingest("t", "wiki", docs)
            before = services.library.partitions("t")[0]
            built_for = services.library.snapshot("t", "wiki").language
            record = services.library.store.get_partition("t", "wiki")
            services.library.store.set_language(record.id, "multi")  # what a stopped re-index leaves
        async with open_services(settings, warm_up=False, generation=False) as services:
            return before, built_for, services.library.partitions("t")[0], services.library.snapshot("t", "wiki")

    before, built_for, after, snapshot = run(go())
    assert (before.language, before.encoder, built_for) == ("zh", "use", "zh")
    assert (after.language, after.encoder, snapshot.language, after.chunks) == ("multi", "use", "multi", before.chunks)
    assert after.indexed_version == after.version == before.version + 1
