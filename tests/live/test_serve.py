"""The HTTP API on a real server on loopback."""

import re

import httpx

from appliance.evaluate import ndcg_at


def test_health_ready_and_openapi(served):
    with served.client() as c:
        assert c.get("/healthz").json() == {"status": "ok"}
        ready = c.get("/readyz")
        assert ready.status_code == 200 and ready.json()["status"] == "ready"
        doc = c.get("/openapi.json").json()
        assert doc["openapi"].startswith("3.")
        assert {"/v1/documents", "/v1/documents/{id}", "/v1/search", "/healthz", "/readyz", "/v1/ask",
                "/v1/chat/completions", "/v1/models"} <= set(doc["paths"])
        body = doc["paths"]["/v1/search"]["post"]["requestBody"]["content"]["application/json"]["schema"]
        assert body["required"] == ["tenant", "query"]


def test_search_returns_ranked_chunks_with_timings(served, scifact_slice):
    text = next(iter(scifact_slice.queries.values()))
    with served.client() as c:
        reply = c.post("/v1/search", json={"tenant": "sci", "query": text, "k": 5})
    assert reply.status_code == 200, reply.text
    body = reply.json()
    assert len(body["results"]) == 5 and body["partitions"] == ["abstracts"]
    first = body["results"][0]
    assert {"document_id", "chunk_id", "partition", "text", "score", "title"} <= set(first)
    assert first["partition"] == "abstracts" and first["text"] and first["chunk_id"] > 0
    scores = [r["score"] for r in body["results"]]
    assert scores == sorted(scores, reverse=True)
    for stage in ("encode", "bm25", "ann", "fuse", "total"):
        assert stage in body["timings_ms"]


def test_hybrid_quality_on_a_scifact_slice(served, scifact_slice):
    """Real judged queries over their documents plus distractors: the hybrid ranking must be good, not lucky."""
    scores = []
    with served.client() as c:
        for qid, text in scifact_slice.queries.items():
            hits = c.post("/v1/search", json={"tenant": "sci", "query": text, "k": 20}).json()["results"]
            ranked = list(dict.fromkeys(h["document_id"] for h in hits))
            scores.append(ndcg_at(ranked, scifact_slice.qrels[qid]))
    assert sum(scores) / len(scores) > 0.7


def test_ingest_delete_cycle_over_http(served):
    with served.client() as c:
        doc = {"id": "note-1", "title": "Pump manual", "text": "Error code QZ-991 means replace the filter.",
               "metadata": {"lang": "en"}, "time": "2026-01-02T03:04:05Z"}
        reply = c.post("/v1/documents", json={"tenant": "ops", "partition": "manuals", "kind": "manual",
                                              "documents": [doc]})
        assert reply.status_code == 200 and reply.json()["documents"] == [
            {"id": "note-1", "status": "created", "chunks": 1}]
        found = c.post("/v1/search", json={"tenant": "ops", "query": "QZ-991",
                                           "filters": {"kinds": ["manual"]}}).json()["results"]
        assert found[0]["document_id"] == "note-1" and found[0]["metadata"] == {"lang": "en"}
        assert c.get("/v1/partitions", params={"tenant": "ops"}).json()["partitions"][0]["chunks"] == 1
        # other tenants see nothing of it
        assert c.post("/v1/search", json={"tenant": "sci", "query": "QZ-991 filter pump"}).json()["results"][0][
            "document_id"] != "note-1"
        assert c.delete("/v1/documents/note-1", params={"tenant": "sci"}).status_code == 404
        gone = c.delete("/v1/documents/note-1", params={"tenant": "ops"})
        assert gone.status_code == 200 and gone.json()["deleted"][0]["partition"] == "manuals"
        assert c.post("/v1/search", json={"tenant": "ops", "query": "QZ-991"}).json()["results"] == []


def test_naming_another_kind_for_a_partition_is_a_conflict(served):
    with served.client() as c:
        reply = c.post("/v1/documents", json={"tenant": "sci", "partition": "abstracts", "kind": "mail",
                                              "documents": [{"text": "x"}]})
        assert reply.status_code == 409 and error(reply)["field"] == "kind"


def error(reply: httpx.Response) -> dict:
    body = reply.json()
    assert set(body) == {"error"} and body["error"]["message"]
    return body["error"]


def test_bad_input_gets_a_4xx_naming_the_field_and_loses_nothing(served):
    with served.client() as c:
        before = c.get("/v1/partitions", params={"tenant": "sci"}).json()["partitions"][0]
        cases = [
            ({"tenant": "sci", "partition": "abstracts", "documents": [{"title": "no text"}]}, "documents[0].text"),
            ({"tenant": "sci", "partition": "abstracts", "documents": []}, "documents"),
            ({"tenant": "sci", "partition": "abstracts", "documents": [{"text": " \n\t "}]}, "documents[0].text"),
            ({"tenant": "sci", "partition": "abstracts", "documents": [{"text": 5}]}, "documents[0].text"),
            ({"tenant": "../etc", "partition": "abstracts", "documents": [{"text": "x"}]}, "tenant"),
            ({"partition": "abstracts", "documents": [{"text": "x"}]}, "tenant"),
            ({"tenant": "sci", "partition": "abstracts", "documents": [{"text": "x", "time": "yesterday"}]},
             "documents[0].time"),
            ({"tenant": "sci", "partition": "abstracts", "documents": [{"text": "x"}], "extra": 1}, "extra"),
            ({"tenant": "sci", "partition": "abstracts", "documents": [{"text": "a", "id": "d"},
                                                                       {"text": "b", "id": "d"}]}, "documents"),
        ]
        for body, field in cases:
            reply = c.post("/v1/documents", json=body)
            assert reply.status_code == 422, (body, reply.text)
            assert error(reply)["field"] == field
        for body, field in [({"tenant": "sci", "query": ""}, "query"), ({"tenant": "sci", "query": "  "}, "query"), ({"tenant": "sci", "query": "x", "k": 0}, "k"),
                            ({"tenant": "sci", "query": "x", "k": "ten"}, "k"),
                            ({"tenant": "sci", "query": "x", "k": 1000}, "k"),
                            ({"tenant": "sci", "query": ["x"]}, "query"),
                            ({"tenant": "sci", "query": "x", "filters": {"kinds": "mail"}}, "filters.kinds")]:
            reply = c.post("/v1/search", json=body)
            assert reply.status_code == 422 and error(reply)["field"] == field, reply.text
        bad_json = c.post("/v1/search", content=b'{"tenant": "sci", "query": ', headers={"content-type": "application/json"})
        assert bad_json.status_code == 400 and error(bad_json)["code"] == "invalid_json"
        json_type = {"content-type": "application/json"}
        bad_utf8 = c.post("/v1/search", content=b'{"tenant": "sci", "query": "\xff\xfe"}', headers=json_type)
        assert bad_utf8.status_code == 400 and error(bad_utf8)["code"] == "invalid_utf8"
        not_object = c.post("/v1/search", json=[1, 2])
        assert not_object.status_code == 422 and error(not_object)["field"] == "body"
        too_big = c.post("/v1/search", content=b"x" * (served.settings.server.max_query_body_bytes + 1),
                         headers=json_type)
        assert too_big.status_code == 413 and error(too_big)["code"] == "body_too_large"
        assert c.post("/v1/search", content=b"", headers=json_type).status_code == 400
        not_json = c.post("/v1/search", content=b'{"tenant": "sci", "query": "x"}',
                          headers={"content-type": "text/plain"})
        assert not_json.status_code == 415 and error(not_json)["field"] == "Content-Type"
        assert c.get("/v1/search").status_code == 405
        after = c.get("/v1/partitions", params={"tenant": "sci"}).json()["partitions"][0]
    assert after == before  # nothing stored was lost or changed


def test_not_finite_numbers_are_rejected(served):
    with served.client() as c:
        reply = c.post("/v1/documents", headers={"content-type": "application/json"},
                       content=b'{"tenant":"sci","partition":"p","documents":[{"text":"x","time":NaN}]}')
    # NaN is not JSON (Python's parser accepts it): refused while parsing, before any field is looked at
    assert reply.status_code == 400 and error(reply)["code"] == "invalid_json" and "NaN" in error(reply)["message"]


def test_ask_without_engines_answers_retrieval_only(served):
    """generate.enabled = false (this server): the answer is the passages, flagged degraded, with the reason."""
    with served.client() as c:
        body = c.post("/v1/ask", json={"tenant": "sci", "question": "What causes myelodysplastic syndrome?"}).json()
        models = c.get("/v1/models").json()
    assert body["degraded"] is True and body["route"]["engine"] is None
    assert "generation is turned off" in body["route"]["reason"]
    assert body["sources"] and body["answer"].startswith("No generated answer")
    # the passages' sentences that best answer the question, each cited by its passage's number
    assert "From the documents:" in body["answer"] and "yelodysplas" in body["answer"].split("documents:")[1]
    assert re.search(r"\[\d\]", body["answer"]) and body["grounding"]["label"] == "not_checked"
    # the engines the settings enable (one by default: large), none running
    assert [(m["id"], m["state"]) for m in models["data"] if m["id"] != "auto"] == [("large", "disabled")]


def test_every_route_is_documented_and_named(settings):
    """The OpenAPI document lists exactly the routes served; each has a name (its endpoint label in metrics)."""
    from appliance.serve.routes import ROUTES
    from appliance.serve.api.openapi import operations

    served = {(method.lower(), route.path.replace(":path}", "}")) for route in ROUTES for method in route.methods
              if method != "HEAD"}
    assert served == {(op.method, op.path) for op in operations(settings)}
    assert all(route.name for route in ROUTES)


def test_boot_in_the_background_then_fail_visibly(settings):
    """/healthz answers while the services boot; /readyz and /v1 say 503 until then, and show a failed boot."""
    import asyncio
    import contextlib
    import time

    from starlette.testclient import TestClient

    from appliance.serve import create_app

    closed = []

    @contextlib.asynccontextmanager
    async def booting(_settings):
        try:
            await asyncio.Event().wait()  # never set: the boot is still under way when the server stops
            yield
        finally:
            closed.append(True)

    with TestClient(create_app(settings, open_services=booting), base_url="http://localhost") as c:
        assert c.get("/healthz").status_code == 200
        starting = c.get("/readyz")
        assert starting.status_code == 503 and starting.json() == {"status": "starting"}
        refused = c.get("/v1/partitions", params={"tenant": "a"})
        assert refused.status_code == 503 and refused.headers["retry-after"] == "1"
        assert error(refused)["code"] == "not_ready" and "warming up" in error(refused)["message"]
    assert closed == [True], "stopping the server cancelled the boot, which closed what it had opened"

    @contextlib.asynccontextmanager
    async def failing(_settings):
        raise RuntimeError("the data folder is unreadable")
        yield

    with TestClient(create_app(settings, open_services=failing), base_url="http://localhost") as c:
        deadline = time.time() + 10
        while c.get("/readyz").json()["status"] == "starting" and time.time() < deadline:
            time.sleep(0.01)
        failed = c.get("/readyz")
        assert failed.status_code == 503 and failed.json() == {"status": "failed"}  # why: in the log
        refused = c.post("/v1/search", json={"tenant": "a", "query": "x"})
        assert refused.status_code == 503 and "boot failed" in error(refused)["message"]
        assert "unreadable" not in error(refused)["message"]


def test_why_a_boot_failed_is_for_an_admin_only(tmp_path, models_dir):
    """The open /readyz and a tenant's key see that the boot failed; only an admin's key sees why (a path)."""
    import contextlib
    import time

    from support import LiveServer, make_settings, write_keys

    keys_file, keys = write_keys(tmp_path, ["acme"], admin=True)
    settings = make_settings(tmp_path / "data", models_dir, admission_keys_file=str(keys_file))

    @contextlib.asynccontextmanager
    async def failing(_settings):
        raise RuntimeError("cannot read /srv/secret-folder/store.db")
        yield

    live = LiveServer(settings, open_services=failing)
    live.start()
    try:
        deadline = time.time() + 10
        while httpx.get(live.url + "/readyz").json()["status"] == "starting" and time.time() < deadline:
            time.sleep(0.05)
        assert httpx.get(live.url + "/readyz").json() == {"status": "failed"}
        with live.client(keys["acme"]) as c:
            assert c.get("/readyz").json() == {"status": "failed"}
            refused = c.get("/v1/partitions", params={"tenant": "acme"})
            assert refused.status_code == 503 and "secret-folder" not in refused.text
        with live.client(keys["admin"]) as c:
            assert c.get("/readyz").json() == {
                "status": "failed", "error": "RuntimeError: cannot read /srv/secret-folder/store.db"}
    finally:
        live.__exit__()
