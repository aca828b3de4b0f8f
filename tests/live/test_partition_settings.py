"""A partition's own weight of the vector list in hybrid fusion: GET/PATCH /v1/partitions/{name} on a running
server and `appliance partition` with it stopped; searches rank by it, answers cached under the old weight are not
served again, it outlives a restart, and hostile requests change nothing."""
from __future__ import annotations

import os
import sqlite3
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor

import pytest

from appliance.evaluate import beir_documents
from appliance.retrieve import PartitionFilter
from appliance.wiring import open_services
from support import (SCIFACT, LiveServer, assert_refused_unchanged, beir_slice, make_settings,
                     partition_route_refusals, run, write_keys)

PAPERS = beir_slice(SCIFACT, queries=8, distractors=120)
QUERIES = list(PAPERS.queries.values())


def _docs():
    return beir_documents(PAPERS.corpus)


def test_a_partitions_own_dense_weight_ranks_its_searches_and_outlives_a_restart(tmp_path, models_dir):
    settings = make_settings(tmp_path, models_dir)
    where = PartitionFilter(tenant="t")

    async def ranked(services, mode: str = "hybrid") -> list[list[int]]:
        out = []
        for query in QUERIES:
            result = await services.retriever.search(query, where, k=10, late_interaction=False, mode=mode)
            out.append([h.chunk.chunk_id for h in result.hits])
        return out

    async def go():
        async with open_services(settings, warm_up=False, generation=False) as services:
            library = services.library
            await library.ingest("t", "papers", _docs())
            default, bm25 = await ranked(services), await ranked(services, "bm25")
            versions = library.versions(where)
            zero = await library.set_dense_weight("t", "papers", 0.0)
            only_bm25 = await ranked(services)
            versions_zero = library.versions(where)
            await library.set_dense_weight("t", "papers", 10.0)
            mostly_dense = await ranked(services)
            back = await library.set_dense_weight("t", "papers", None)
            restored = await ranked(services)
            await library.set_dense_weight("t", "papers", 3.5)
        async with open_services(settings, warm_up=False, generation=False) as services:
            kept = services.library.partitions("t")[0]
            versions_kept = services.library.versions(where)
        return (default, bm25, zero, only_bm25, mostly_dense, back, restored, kept, versions, versions_zero,
                versions_kept)

    (default, bm25, zero, only_bm25, mostly_dense, back, restored, kept, versions, versions_zero,
     versions_kept) = run(go())
    assert zero.dense_weight == 0.0 and back.dense_weight is None and kept.dense_weight == 3.5
    assert only_bm25 == bm25, "weight 0: the vector list adds nothing above BM25's ten"
    assert only_bm25 != default and mostly_dense != default, "the weight changes the ranking"
    assert restored == default, "back to the language's weight: the same ranking as before"
    # what a cached answer depends on: each change of the settings (the index version stays); never back
    assert versions == {"papers": versions["papers"]}
    assert versions_zero == {"papers": versions["papers"], "papers#settings": 1}
    assert versions_kept == {"papers": versions["papers"], "papers#settings": 4}


@pytest.fixture(scope="module")
def keyed(tmp_path_factory, models_dir):
    """A server with API keys: alpha's `papers`, beta's `notes`."""
    folder = tmp_path_factory.mktemp("partition-settings")
    keys_file, keys = write_keys(folder, ["alpha", "beta"], admin=True)
    settings = make_settings(folder, models_dir, admission_keys_file=str(keys_file), server_body_timeout_s="5")
    with LiveServer(settings, api_key=keys["alpha"]) as live:
        live.keys = keys
        docs = [{"id": d.id, "title": d.title, "text": d.text} for d in beir_documents(PAPERS.corpus)]
        with live.client() as c:
            assert c.post("/v1/documents", json={"partition": "papers", "documents": docs}).status_code == 200
        with live.client(keys["beta"]) as c:
            notes = [{"id": f"n{i}", "text": f"Note {i}: the pump restarts after a power cut."} for i in range(3)]
            assert c.post("/v1/documents", json={"partition": "notes", "documents": notes}).status_code == 200
        yield live


def _ranked(live: LiveServer) -> list[list[int]]:
    with live.client() as c:
        replies = [c.post("/v1/search", json={"query": q, "k": 10, "late_interaction": False}) for q in QUERIES]
    assert all(r.status_code == 200 for r in replies), [r.text for r in replies]
    return [[hit["chunk_id"] for hit in r.json()["results"]] for r in replies]


def test_a_partitions_dense_weight_set_over_http_changes_its_searches_and_default_restores_them(keyed):
    with keyed.client() as c:
        before = c.get("/v1/partitions/papers")
        default = _ranked(keyed)
        heavy = c.patch("/v1/partitions/papers", json={"dense_weight": 10})
        ranked_heavy = _ranked(keyed)
        listed = {p["name"]: p for p in c.get("/v1/partitions").json()["partitions"]}
        reset = c.patch("/v1/partitions/papers", json={"dense_weight": "default"})
        ranked_reset = _ranked(keyed)
    assert before.status_code == 200 and before.json()["dense_weight"] is None, before.text
    assert before.json()["documents"] == len(PAPERS.corpus) and before.json()["index_bytes"] > 0
    assert heavy.status_code == 200 and heavy.json()["dense_weight"] == 10.0, heavy.text
    assert heavy.json()["version"] == before.json()["version"], "no new index version: the weight is read per search"
    assert listed["papers"]["dense_weight"] == 10.0
    assert ranked_heavy != default and ranked_reset == default
    assert reset.status_code == 200 and reset.json()["dense_weight"] is None


def test_concurrent_settings_end_in_one_of_them_as_stored(keyed):
    weights = [0.1 * i for i in range(8)]

    def patch(weight: float):
        with keyed.client() as c:
            return c.patch("/v1/partitions/papers", json={"dense_weight": weight})

    with ThreadPoolExecutor(8) as pool:
        replies = list(pool.map(patch, weights))
    with keyed.client() as c:
        final = c.get("/v1/partitions/papers").json()
    with sqlite3.connect(keyed.settings.store_path) as db:  # what a restart would read
        stored, generation = db.execute("SELECT dense_weight, settings_version FROM partitions WHERE tenant = ? "
                                        "AND name = ?", ("alpha", "papers")).fetchone()
    with keyed.client() as c:
        assert c.patch("/v1/partitions/papers", json={"dense_weight": "default"}).status_code == 200
    assert [r.status_code for r in replies] == [200] * 8, [r.text for r in replies]
    assert final["dense_weight"] == stored and stored in weights
    assert generation >= 8 and len({r.json()["dense_weight"] for r in replies}) == 8


@pytest.mark.parametrize("path, body, status, field", [
    *partition_route_refusals("", {"dense_weight": 0.5}),
    ("/v1/partitions/papers", b'{"dense_weight": NaN}', 400, None),
    ("/v1/partitions/papers", b"{}", 422, "dense_weight"),
    ("/v1/partitions/papers", b'{"dense_weight": null}', 422, "dense_weight"),
    ("/v1/partitions/papers", b'{"dense_weight": -0.5}', 422, "dense_weight"),
    ("/v1/partitions/papers", b'{"dense_weight": 10.01}', 422, "dense_weight"),
    ("/v1/partitions/papers", b'{"dense_weight": 1e308}', 422, "dense_weight"),
    ("/v1/partitions/papers", b'{"dense_weight": true}', 422, "dense_weight"),
    ("/v1/partitions/papers", b'{"dense_weight": "0.5"}', 422, "dense_weight"),
    ("/v1/partitions/papers", b'{"dense_weight": [0.5]}', 422, "dense_weight"),
    ("/v1/partitions/papers", b'{"dense_weight": 0.5, "bm25_weight": 2}', 422, "bm25_weight"),
])
def test_wrong_partition_settings_are_refused_and_change_nothing(keyed, path, body, status, field):
    def seen() -> tuple:
        with keyed.client() as c:
            mine = c.get("/v1/partitions").json()
        with keyed.client(keyed.keys["beta"]) as c:
            theirs = c.get("/v1/partitions").json()
        return mine, theirs

    assert_refused_unchanged(keyed, "PATCH", path, body, status, field, seen)


def test_another_tenants_partition_and_other_methods(keyed):
    with keyed.client() as c:
        theirs = c.get("/v1/partitions/notes", params={"tenant": "beta"})
        unknown = c.get("/v1/partitions/notes")  # alpha has none of that name
        form = c.patch("/v1/partitions/papers", content=b"dense_weight=1",
                       headers={"content-type": "application/x-www-form-urlencoded"})
        delete = c.delete("/v1/partitions/papers")
    with keyed.client(keyed.keys["admin"]) as c:  # an admin names the tenant
        admin_view = c.get("/v1/partitions/notes", params={"tenant": "beta"})
        unnamed = c.get("/v1/partitions/notes")
    assert theirs.status_code == 403 and theirs.json()["error"]["field"] == "tenant"
    assert unknown.status_code == 404 and "beta" not in unknown.text
    assert form.status_code == 415
    assert delete.status_code == 405 and set(delete.headers["allow"].split(", ")) >= {"GET", "PATCH"}
    assert admin_view.status_code == 200 and admin_view.json()["tenant"] == "beta", admin_view.text
    assert unnamed.status_code == 422


def test_the_cli_sets_a_weight_with_the_server_stopped(tmp_path, models_dir):
    settings = make_settings(tmp_path, models_dir)

    async def ingest():
        async with open_services(settings, warm_up=False, generation=False) as services:
            await services.library.ingest("t", "kb", _docs()[:20])

    run(ingest())
    env = {**os.environ, "APPLIANCE_DATA_DIR": str(settings.data_dir), "APPLIANCE_MODELS_DIR": str(models_dir),
           "APPLIANCE_DEMO_CORPUS": "false", "APPLIANCE_GENERATE_ENABLED": "false"}

    def cli(*args: str) -> subprocess.CompletedProcess:
        return subprocess.run([sys.executable, "-m", "appliance", "partition", *args], env=env, capture_output=True,
                              text=True, timeout=300)

    done = cli("--tenant", "t", "--partition", "kb", "--dense-weight", "0.2")
    wrong = cli("--tenant", "t", "--partition", "kb", "--dense-weight", "eleven")
    missing = cli("--tenant", "t", "--partition", "nope", "--dense-weight", "1")

    async def read():
        async with open_services(settings, warm_up=False, generation=False) as services:
            return services.library.partitions("t")[0]

    assert done.returncode == 0 and "t/kb: dense weight 0.2" in done.stdout, done.stderr
    assert wrong.returncode == 2 and "0 to 10" in wrong.stderr
    assert missing.returncode != 0 and "no partition 'nope'" in missing.stderr
    assert run(read()).dense_weight == 0.2
