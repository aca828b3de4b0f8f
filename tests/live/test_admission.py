"""Admission over HTTP (no engines): API keys map to tenants, tenants never see each other's documents, token
buckets answer 429 with Retry-After, every request gets an id, /metrics and the request log see every stage."""
import json
import logging

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families

from appliance.serve.admission.gate import TokenBuckets
from appliance.serve.admission.keys import ApiKeys, KeysFileError, hash_key
from support import LiveServer, make_settings, write_keys

DOCS = {"alpha": [{"id": "a1", "text": "Alpha's quarterly revenue grew because of the new turbine line."}],
        "beta": [{"id": "b1", "text": "Beta keeps its turbine maintenance logs in the west archive."}]}


@pytest.fixture(scope="module")
def keyed(tmp_path_factory, models_dir):
    folder = tmp_path_factory.mktemp("keyed")
    keys_file, keys = write_keys(folder, ["alpha", "beta"])
    settings = make_settings(folder, models_dir, admission_keys_file=str(keys_file))
    with LiveServer(settings, api_key=keys["alpha"]) as live:
        live.keys = keys
        for tenant, docs in DOCS.items():
            with live.client(keys[tenant]) as c:
                assert c.post("/v1/documents", json={"partition": "notes", "documents": docs}).status_code == 200
        yield live


def test_requests_without_a_valid_key_get_401(keyed):
    with keyed.client("rak_not-a-key") as c:
        wrong = c.post("/v1/search", json={"query": "turbine"})
    with httpx.Client(base_url=keyed.url, timeout=60) as c:
        missing = c.post("/v1/search", json={"query": "turbine"})
        basic = c.get("/v1/partitions", headers={"Authorization": "Basic YWxwaGE6eA=="})
    for reply in (wrong, missing, basic):
        assert reply.status_code == 401 and reply.headers["www-authenticate"] == "Bearer"
        assert reply.json()["error"]["code"] == "unauthorized"
    assert "missing API key" in missing.json()["error"]["message"]
    with keyed.client() as c:
        assert c.get("/healthz").status_code == 200 and c.get("/metrics").status_code == 200  # not under /v1/


def test_metrics_need_a_key_where_keys_are_configured(keyed):
    with httpx.Client(base_url=keyed.url, timeout=60) as c:
        missing = c.get("/metrics")
        wrong = c.get("/metrics", headers={"Authorization": "Bearer rak_not-a-key"})
    with keyed.client(keyed.keys["beta"]) as c:
        allowed = c.get("/metrics")  # any tenant's key
    for reply in (missing, wrong):
        assert reply.status_code == 401 and reply.headers["www-authenticate"] == "Bearer"
        assert reply.json()["error"]["code"] == "unauthorized"
    assert allowed.status_code == 200 and "appliance_requests_total" in allowed.text


def test_a_tenant_never_reads_another_tenants_documents(keyed):
    with keyed.client(keyed.keys["beta"]) as c:
        own = c.post("/v1/search", json={"query": "turbine revenue"}).json()
        named = c.post("/v1/search", json={"tenant": "alpha", "query": "turbine revenue"})
        partitions = c.get("/v1/partitions").json()["partitions"]
        other_partitions = c.get("/v1/partitions", params={"tenant": "alpha"})
        delete = c.delete("/v1/documents/a1", params={"tenant": "alpha"})
        answer = c.post("/v1/ask", json={"question": "Why did revenue grow?"}).json()
    assert [r["document_id"] for r in own["results"]] == ["b1"]
    assert named.status_code == 403 and named.json()["error"]["code"] == "forbidden"
    assert {p["tenant"] for p in partitions} == {"beta"}
    assert other_partitions.status_code == 403 and delete.status_code == 403
    assert {s["document_id"] for s in answer["sources"]} <= {"b1"}
    with keyed.client(keyed.keys["alpha"]) as c:
        assert [r["document_id"] for r in c.post("/v1/search", json={"query": "turbine"}).json()["results"]] \
            == ["a1"], "alpha's document is still there"
        assert c.delete("/v1/documents/b1").status_code == 404, "deleting by id only reaches the key's tenant"


def test_degraded_answers_are_not_cached(keyed):
    with keyed.client() as c:
        first = c.post("/v1/ask", json={"question": "What grew?"}).json()
        second = c.post("/v1/ask", json={"question": "What grew?"}).json()
        entries = c.get("/v1/cache/entries").json()["entries"]
    assert first["degraded"] and second["degraded"]
    assert first["cache"] == second["cache"] == "none" and entries == []


def test_request_ids_metrics_and_one_log_line_per_request(keyed, caplog):
    with caplog.at_level(logging.INFO, logger="appliance.requests"), keyed.client() as c:
        reply = c.post("/v1/search", json={"query": "turbine"}, headers={"X-Request-Id": "trace-42"})
        unauthorized = c.post("/v1/search", json={"query": "x"}, headers={"Authorization": "Bearer nope"})
        metrics = c.get("/metrics").text
    assert reply.headers["x-request-id"] == "trace-42" and unauthorized.headers["x-request-id"]
    lines = [json.loads(r.getMessage()) for r in caplog.records if r.name == "appliance.requests"]
    mine = next(line for line in lines if line["request_id"] == "trace-42")
    assert mine["tenant"] == "alpha" and mine["status"] == 200 and mine["endpoint"] == "search"
    assert {"encode", "bm25", "ann", "fuse", "total"} <= set(mine["timings_ms"])
    assert any(line["status"] == 401 for line in lines)
    samples = {(s.name, tuple(sorted(s.labels.items()))): s.value
               for f in text_string_to_metric_families(metrics) for s in f.samples}
    assert samples[("appliance_stage_seconds_count", (("stage", "bm25"),))] >= 1
    assert samples[("appliance_rejected_total", (("endpoint", "search"), ("reason", "unauthorized")))] >= 1
    assert ("appliance_in_flight_requests", ()) in samples


def test_rate_limit_answers_429_with_retry_after(tmp_path, models_dir):
    keys_file, keys = write_keys(tmp_path, ["busy", "calm"])
    settings = make_settings(tmp_path, models_dir, admission_keys_file=str(keys_file), admission_rate_per_s="0.5",
                             admission_burst="3")
    with LiveServer(settings) as live:
        with live.client(keys["calm"]) as c:  # the buckets apply while tenants compete: calm is there
            assert c.get("/v1/partitions").status_code == 200
        with live.client(keys["busy"]) as c:
            statuses = [c.get("/v1/partitions").status_code for _ in range(5)]
            limited = c.get("/v1/partitions")
        with live.client(keys["calm"]) as c:
            calm = c.get("/v1/partitions").status_code
    assert statuses[:3] == [200, 200, 200] and statuses[3:] == [429, 429]
    assert limited.status_code == 429 and int(limited.headers["retry-after"]) >= 1
    assert limited.json()["error"]["code"] == "rate_limited"
    assert calm == 200, "one tenant's bucket does not drain another's"


def test_keys_file_holds_hashes_only(tmp_path):
    path, keys = write_keys(tmp_path, ["alpha"])
    text = path.read_text()
    assert keys["alpha"] not in text and hash_key(keys["alpha"]) in text
    assert ApiKeys.load(path).tenant_for(keys["alpha"]) == "alpha"
    assert ApiKeys.load(path).tenant_for(keys["alpha"] + "x") is None
    path.write_text('[[keys]]\nsha256 = "abc"\ntenant = "x"\n')
    with pytest.raises(KeysFileError, match="64 hex"):
        ApiKeys.load(path)


def test_token_bucket_refills_at_its_rate():
    buckets = TokenBuckets(rate=0.5, burst=2)
    assert buckets.take("t") == 0 and buckets.take("t") == 0
    assert 1.9 < buckets.take("t") <= 2.0, "an empty bucket of 0.5/s has its next token in 2 s"
    assert buckets.take("u") == 0
