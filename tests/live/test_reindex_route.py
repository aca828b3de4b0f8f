"""A partition re-indexed over HTTP on a running server (POST/GET /v1/partitions/{name}/reindex): another language
while it is searched, one re-index at a time on the box with tenants taking turns in a bounded queue, hostile
requests refused with nothing changed, another tenant's partitions out of reach, a slow body timed out, and a server
stopped mid-way finishing it at its next boot."""
from __future__ import annotations

import asyncio
import socket
import time
from concurrent.futures import ThreadPoolExecutor

import pytest

from appliance.evaluate import beir_documents
from appliance.library import JobState
from appliance.wiring import open_services
from support import (CMRC, SCIFACT, LiveServer, assert_refused_unchanged, beir_slice, make_settings,
                     partition_route_refusals, run, write_keys)

PAPERS = beir_slice(SCIFACT, queries=6, distractors=250)  # several hundred chunks: a re-index takes seconds


@pytest.fixture(scope="module")
def keyed(tmp_path_factory, models_dir):
    """One server with API keys: tenant alpha's English partition `papers`, beta's small `notes` and `memos`; gamma
    and delta for the queue's turns. The box queues at most 5 re-indexes, a tenant has at most 4."""
    folder = tmp_path_factory.mktemp("reindex")
    keys_file, keys = write_keys(folder, ["alpha", "beta", "gamma", "delta"], admin=True)
    settings = make_settings(folder, models_dir, admission_keys_file=str(keys_file), server_body_timeout_s="5",
                             index_reindex_per_tenant="4", index_reindex_queued="5")
    with LiveServer(settings, api_key=keys["alpha"]) as live:
        live.keys = keys
        docs = [{"id": d.id, "title": d.title, "text": d.text} for d in beir_documents(PAPERS.corpus)]
        with live.client() as c:
            assert c.post("/v1/documents", json={"partition": "papers", "documents": docs}).status_code == 200
        with live.client(keys["beta"]) as c:
            for name in ("notes", "memos"):
                assert c.post("/v1/documents", json={"partition": name, "documents": _notes(5)}).status_code == 200
        yield live


def _notes(count: int) -> list[dict]:
    return [{"id": f"n{i}", "text": f"Note {i}: the pump restarts after a power cut."} for i in range(count)]


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
            if state["state"] not in ("queued", "running"):
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

    with ThreadPoolExecutor(6) as pool:  # six at once: one starts, the others find it pending
        replies = list(pool.map(post, range(6)))
    started = [r for r in replies if r.status_code == 202]
    refused = [r for r in replies if r.status_code == 409]
    assert len(started) == 1 and len(refused) == 5, [(r.status_code, r.text) for r in replies]
    job = started[0].json()
    assert (job["tenant"], job["partition"], job["state"], job["language"], job["tokens"], job["ahead"]) == \
        ("alpha", "papers", "running", "multi", False, 0)
    assert started[0].headers["location"] == "/v1/partitions/papers/reindex" and job["result"] is None
    for reply in refused:
        error = reply.json()["error"]
        assert error["code"] == "reindex_pending" and "'papers'" in error["message"], reply.text
        assert reply.headers["location"] == "/v1/partitions/papers/reindex"
    with keyed.client(beta) as c:  # another tenant's waits its turn, told how many are ahead, not whose or which
        theirs = c.post("/v1/partitions/memos/reindex", json={})
    assert theirs.status_code == 202, theirs.text
    assert (theirs.json()["state"], theirs.json()["ahead"], theirs.json()["started_at"]) == ("queued", 1, None)
    assert "papers" not in theirs.text and "alpha" not in theirs.text

    searched = []  # the partition keeps answering from its previous version meanwhile
    with keyed.client() as c:
        while c.get("/v1/partitions/papers/reindex").json()["state"] in ("queued", "running"):
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
    memos = _wait_done(keyed, "memos", beta)
    assert memos["state"] == "done" and memos["started_at"] >= done["ended_at"], (memos, done)
    assert (memos["result"]["language"], memos["result"]["encoder"], memos["result"]["chunks"]) == ("en", "minilm", 5)


def test_tenants_take_turns_in_a_bounded_queue(keyed):
    """While alpha's long re-index holds the box, gamma queues four and delta one: delta's starts right after
    gamma's first, not after all four; a fifth of gamma's, and anything past the box's five queued, is a 429."""
    gamma, delta, beta = keyed.keys["gamma"], keyed.keys["delta"], keyed.keys["beta"]
    for key, names in ((gamma, [f"g{i}" for i in range(5)]), (delta, ["d0"])):
        with keyed.client(key) as c:
            for name in names:
                assert c.post("/v1/documents", json={"partition": name, "documents": _notes(3)}).status_code == 200
    with keyed.client() as c:
        blocker = c.post("/v1/partitions/papers/reindex", json={})  # encodes a few hundred chunks: seconds
    assert blocker.status_code == 202 and blocker.json()["state"] == "running", blocker.text
    with keyed.client(gamma) as c:
        queued = [c.post(f"/v1/partitions/g{i}/reindex", json={}) for i in range(4)]
        over_share = c.post("/v1/partitions/g4/reindex", json={})
    with keyed.client(delta) as c:
        theirs = c.post("/v1/partitions/d0/reindex", json={})
    with keyed.client(beta) as c:
        box_full = c.post("/v1/partitions/notes/reindex", json={})  # gamma's 4 and delta's 1 fill the box's 5
    with keyed.client(gamma) as c:
        still_queued = c.get("/v1/partitions/g3/reindex").json()

    assert [r.status_code for r in queued] == [202] * 4, [r.text for r in queued]
    assert [(r.json()["state"], r.json()["ahead"]) for r in queued] == [("queued", n) for n in (1, 2, 3, 4)]
    # delta has not been served: its one comes after gamma's first (asked earlier), before gamma's others
    assert theirs.status_code == 202 and (theirs.json()["state"], theirs.json()["ahead"]) == ("queued", 2)
    assert not any(word in theirs.text for word in ("alpha", "gamma", "papers", "g0"))
    assert (still_queued["state"], still_queued["ahead"], still_queued["started_at"]) == ("queued", 5, None)
    for reply in (over_share, box_full):
        assert reply.status_code == 429 and reply.json()["error"]["code"] == "reindex_queue_full", reply.text
        assert reply.headers["retry-after"]
    assert "gamma" not in box_full.text
    assert "'gamma'" in over_share.json()["error"]["message"]
    with keyed.client(beta) as c:
        assert c.get("/v1/partitions/notes/reindex").status_code == 404, "a refused re-index is not recorded"

    ended = {name: _wait_done(keyed, name, key) for key, name in
             ((gamma, "g0"), (gamma, "g1"), (gamma, "g2"), (gamma, "g3"), (delta, "d0"))}
    assert all(job["state"] == "done" and job["result"]["chunks"] == 3 for job in ended.values()), ended
    order = sorted(ended, key=lambda name: ended[name]["started_at"])
    assert order == ["g0", "d0", "g1", "g2", "g3"], order
    for before, after in zip(order, order[1:]):  # one at a time
        assert ended[after]["started_at"] >= ended[before]["ended_at"], (before, after)
    assert ended["g0"]["started_at"] >= _wait_done(keyed, "papers", keyed.keys["alpha"])["ended_at"]


@pytest.mark.parametrize("path, body, status, field", [
    *partition_route_refusals("/reindex", {}),
    ("/v1/partitions/papers/reindex", b'{"language": "klingon"}', 422, "language"),
    ("/v1/partitions/papers/reindex", b'{"language": 3}', 422, "language"),
    ("/v1/partitions/papers/reindex", b'{"language": ["zh"]}', 422, "language"),
    ("/v1/partitions/papers/reindex", b'{"tokens": "yes"}', 422, "tokens"),
    ("/v1/partitions/papers/reindex", b'{"tokens": true, "language": "zh"}', 422, "tokens"),
    ("/v1/partitions/papers/reindex", b'{"lang": "zh"}', 422, "lang"),
])
def test_wrong_reindex_requests_are_refused_and_change_nothing(keyed, path, body, status, field):
    def seen() -> tuple:
        with keyed.client() as c:
            job = c.get("/v1/partitions/papers/reindex")
        return _listed(keyed, keyed.keys["alpha"]), _listed(keyed, keyed.keys["beta"]), job.status_code, job.text

    assert_refused_unchanged(keyed, "POST", path, body, status, field, seen)  # and no re-index started


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
    docs = beir_documents(beir_slice(SCIFACT, queries=3, distractors=200).corpus)
    settings = make_settings(tmp_path, models_dir)

    async def go():
        async with open_services(settings, warm_up=False, generation=False) as services:
            await services.library.ingest("t", "kb", docs)
            await services.library.ingest("t", "kb2", docs[:3])
            named = {p.name: p for p in services.library.partitions("t")}
            before, queued_before = named["kb"], named["kb2"]
            reindexer = services.reindexer
            reindexer.start("t", "kb", "multi")
            assert reindexer.start("t", "kb2", "multi").state is JobState.QUEUED  # behind kb
            with pytest.raises(LookupError):
                reindexer.start("t", "nope")
            deadline = time.monotonic() + 120
            while services.library.store.get_partition("t", "kb").language != "multi":
                assert time.monotonic() < deadline and reindexer.job("t", "kb").state is JobState.RUNNING
                await asyncio.sleep(0.01)  # the new language is stored; its build is running
        stopped, never_started = reindexer.job("t", "kb"), reindexer.job("t", "kb2")
        async with open_services(settings, warm_up=False, generation=False) as services:
            named = {p.name: p for p in services.library.partitions("t")}
            after, queued_after = named["kb"], named["kb2"]
            return before, stopped, after, queued_before, never_started, queued_after

    before, stopped, after, queued_before, never_started, queued_after = run(go())
    assert never_started.state is JobState.FAILED and never_started.started_at is None, never_started
    assert never_started.error == "the server stopped before it started"
    assert queued_after == queued_before, "a queued re-index that never started changed nothing"
    assert (before.language, before.encoder) == ("en", "minilm")
    assert stopped.state is JobState.FAILED and stopped.error == "the server stopped first", stopped
    assert (after.language, after.encoder, after.chunks) == ("multi", "use", before.chunks)
    # a new version (one more if the stopped build had already taken one)
    assert after.indexed_version == after.version > before.version


def test_a_language_change_stopped_before_its_build_is_built_at_the_next_boot(tmp_path, models_dir):
    """zh and multi share an encoder: a re-index between them stopped after storing the language but before its
    build left the version alone, and the next boot builds the partition for its language all the same."""
    docs = beir_documents(beir_slice(CMRC, queries=3, distractors=20).corpus)
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
