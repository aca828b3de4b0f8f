"""Fuzz the HTTP API from its own OpenAPI document (schemathesis), then throw malformed bodies at it.

Two real servers on loopback, generation off: one open (no API keys), one with API keys, where the fuzzer holds a
key for its own tenant only. Each keeps a small SciFact slice under a tenant the fuzzer does not reach. Every
documented operation gets schema-valid and schema-invalid requests (the coverage phase's boundary cases and
unlisted methods, then EXAMPLES generated ones); whatever it gets, a server must not answer 5xx (503 with
Retry-After excepted: not ready / overloaded), must answer every 4xx with `{"error": {"code", "message"}}`, must
answer only what the document lists, and must still be healthy, with the kept documents intact, afterwards.
Derandomized: the same requests on every run.
"""
from __future__ import annotations

import json
from pathlib import Path

import httpx
import hypothesis
import pytest
import schemathesis
from schemathesis.checks import not_a_server_error
from schemathesis.config import SchemathesisConfig

from appliance.evaluate import beir_documents
from appliance.serve.admission.keys import hash_key
from appliance.serve.api.openapi import openapi
from support import ROOT, SCIFACT, LiveServer, beir_slice, make_settings

MAX_BODY = 65536
EXAMPLES = 25  # generated requests per operation (fuzzing phase), beyond the coverage phase's boundary cases
KEEP_TENANT, KEEP_PARTITION = "kept_corpus-7Qx", "abstracts"  # matches NAME_PATTERN; no generator lands on it
FUZZ_KEY, KEEP_KEY = "rak_fuzzer-" + "f" * 32, "rak_keeper-" + "k" * 32  # fixed test keys; the file holds hashes
FUZZ_TENANT = "fuzzed"
# No rate limit in the way: a 429 would end most requests before they reach anything worth fuzzing.
ENV = {"server_max_body_bytes": str(MAX_BODY), "admission_rate_per_s": "1000000", "admission_burst": "1000000"}


def _config(auth: dict | None = None) -> SchemathesisConfig:
    return SchemathesisConfig.from_dict({
        "seed": 20240601,
        "generation": {"mode": "all", "max-examples": EXAMPLES, "deterministic": True, "database": "none"},
        # The stateful phase needs links the document does not declare; explicit examples it has none.
        "phases": {"examples": {"enabled": False}, "coverage": {"enabled": True}, "fuzzing": {"enabled": True},
                   "stateful": {"enabled": False}},
        "checks": {
            # 503 is allowed (with Retry-After, checked in check_error_contract), other 5xx fail there.
            "not_a_server_error": {"enabled": False},
            # The document cannot say "a chat needs a user message", "this id exists", "this kind conflicts"
            # or "this is the key's tenant"; nor "this file's bytes are a PDF" (415 for other content, 413 for an
            # Office file that unpacks past its limits).
            "positive_data_acceptance": {"expected-statuses": ["2xx", "401", "403", "404", "409", "413", "415",
                                                              "422", "429", "503"]},
            # A schema-violating body may be refused as too large first (413), a missing one as not JSON (415);
            # no 5xx here, 503 aside.
            "negative_data_rejection": {"expected-statuses": ["400", "401", "403", "404", "405", "409", "413",
                                                              "415", "422", "429", "503"]},
        },
        **({"auth": {"openapi": {"bearerAuth": {"bearer": auth}}}} if auth else {}),
    })


def _settings(data_dir: Path, models_dir: Path, keys_file: Path | None = None):
    return make_settings(data_dir, models_dir, **ENV, **({"admission_keys_file": str(keys_file)} if keys_file else {}))


# The documents are built at collection time from the settings the servers get (the document depends on limits
# such as max_body_bytes and on whether keys are configured, not on folders); test_served_documents_are_the_fuzzed
# ones checks each server serves exactly its one.
DOC_OPEN = openapi(_settings(Path("unused"), ROOT / "models"))
DOC_KEYED = openapi(_settings(Path("unused"), ROOT / "models", Path("keys.toml")))


def _schema(doc: dict, auth: str | None = None):
    return schemathesis.openapi.from_dict(doc, config=_config(auth))


open_schema, keyed_schema = _schema(DOC_OPEN), _schema(DOC_KEYED, FUZZ_KEY)


def _kept_corpus() -> list[dict]:
    slice_ = beir_slice(SCIFACT, queries=3, distractors=12)
    return [{"id": d.id, "title": d.title, "text": d.text} for d in beir_documents(slice_.corpus)]


def _serve(settings, key: str | None):
    live = LiveServer(settings, api_key=key)
    live.__enter__()
    live.kept = _kept_corpus()  # type: ignore[attr-defined]
    with live.client() as client:
        reply = client.post("/v1/documents", json={"tenant": KEEP_TENANT, "partition": KEEP_PARTITION,
                                                   "documents": live.kept})
        assert reply.status_code == 200, reply.text
    return live


@pytest.fixture(scope="module")
def open_server(tmp_path_factory, models_dir):
    live = _serve(_settings(tmp_path_factory.mktemp("fuzz-open"), models_dir), None)
    yield live
    live.__exit__()


@pytest.fixture(scope="module")
def keyed_server(tmp_path_factory, models_dir):
    data_dir = tmp_path_factory.mktemp("fuzz-keyed")
    keys_file = data_dir / "keys.toml"
    keys_file.write_text("".join(f'[[keys]]\nsha256 = "{hash_key(key)}"\ntenant = "{tenant}"\n\n'
                                 for key, tenant in ((FUZZ_KEY, FUZZ_TENANT), (KEEP_KEY, KEEP_TENANT))))
    keys_file.chmod(0o600)  # the server refuses a keys file others can read
    live = _serve(_settings(data_dir, models_dir, keys_file), KEEP_KEY)  # the fuzzer gets FUZZ_KEY only
    yield live
    live.__exit__()


def _header(response, name: str) -> str:
    value = response.headers.get(name, "")  # httpx: a string; schemathesis: a list of strings
    return value if isinstance(value, str) else ", ".join(value)


def check_error_contract(response) -> None:
    """No 5xx but 503 + Retry-After; every 4xx and 503 (404/405 of the router too) carries
    {"error": {"code", "message"}}."""
    status = response.status_code
    request = f"{response.request.method} {response.request.url}"
    assert status < 500 or status == 503, f"{request} -> {status}: {response.text[:500]}"
    if status in (429, 503):
        assert _header(response, "retry-after").isdigit(), f"{request} -> {status} without Retry-After"
    if status < 400:
        return
    assert _header(response, "content-type").startswith("application/json"), \
        f"{request} -> {status} {_header(response, 'content-type')}: {response.text[:200]}"
    error = json.loads(response.content).get("error")
    assert isinstance(error, dict) and isinstance(error.get("code"), str) and error["code"] \
        and isinstance(error.get("message"), str) and error["message"], f"{request} -> {status}: {response.text}"


def _call_and_check(case, live) -> None:
    response = case.call(base_url=live.url, timeout=120)
    check_error_contract(response)
    case.validate_response(response, excluded_checks=[not_a_server_error])


SETTINGS = hypothesis.settings(max_examples=EXAMPLES, deadline=None, derandomize=True, database=None,
                               suppress_health_check=list(hypothesis.HealthCheck))


@open_schema.parametrize()
@SETTINGS
def test_open_api_conforms_to_its_document(case, open_server):
    _call_and_check(case, open_server)


@keyed_schema.parametrize()
@SETTINGS
def test_keyed_api_conforms_to_its_document(case, keyed_server):
    _call_and_check(case, keyed_server)


def test_served_documents_are_the_fuzzed_ones(open_server, keyed_server):
    for live, doc in ((open_server, DOC_OPEN), (keyed_server, DOC_KEYED)):
        served = httpx.get(live.url + "/openapi.json", timeout=30)
        assert served.status_code == 200 and served.json() == json.loads(json.dumps(doc))
    assert DOC_OPEN != DOC_KEYED  # keys change what is required (tenant) and how (security)


def test_keys_are_enforced(keyed_server):
    url = keyed_server.url + "/v1/partitions"
    for headers in ({}, {"Authorization": "Bearer rak_wrong"}, {"Authorization": f"Basic {FUZZ_KEY}"}):
        reply = httpx.get(url, params={"tenant": FUZZ_TENANT}, headers=headers, timeout=30)
        assert reply.status_code == 401, (headers, reply.text)
        check_error_contract(reply)
    other = httpx.get(url, params={"tenant": KEEP_TENANT}, headers={"Authorization": f"Bearer {FUZZ_KEY}"})
    assert other.status_code == 403, other.text
    check_error_contract(other)


# -- raw bodies the generator does not produce --------------------------------------------------------------------

def _post(live, path: str, content: bytes, headers: dict | None = None) -> httpx.Response:
    return httpx.post(live.url + path, content=content, timeout=60,
                      headers={"content-type": "application/json", **(headers or {})})


BAD_BODIES = [  # (body, status, code, words the message or field must contain)
    (b'{"tenant": "a", "query": ', 400, "invalid_json", "not valid JSON"),
    (b'{"tenant": "a", "query": "x",}', 400, "invalid_json", "not valid JSON"),
    (b"", 400, "invalid_json", "empty"),
    (b'{"tenant": "a", "query": "caf\xe9"}', 400, "invalid_utf8", "UTF-8"),
    (b"\xff\xfe{\x00}\x00", 400, "invalid_utf8", "UTF-8"),
    (b'{"tenant": "a", "query": "x", "k": NaN}', 400, "invalid_json", "NaN"),
    (b'{"tenant": "a", "query": "x", "k": 1e999}', 400, "invalid_json", "too large"),
    (b'{"tenant": "a", "query": "x", "k": ' + b"9" * 5000 + b"}", 400, "invalid_json", "digits"),
    (b'{"tenant": "a", "query": "\\ud800"}', 400, "invalid_json", "surrogate"),
    (b"[" * 5000 + b"]" * 5000, 400, "invalid_json", "nested"),
    (b"[" * 500 + b"]" * 500, 400, "invalid_json", "nested"),
    (b'["tenant", "query"]', 422, "invalid_request", "must be an object"),
    (b'"just a string"', 422, "invalid_request", "must be an object"),
    (b"null", 422, "invalid_request", "must be an object"),
    (b'{"tenant": 5, "query": "x"}', 422, "invalid_request", "tenant"),
    (b'{"tenant": "a", "query": "x", "k": "5"}', 422, "invalid_request", "k"),
    (b'{"tenant": "a", "query": "x", "k": 2.5}', 422, "invalid_request", "k"),
    (b'{"tenant": "a", "query": "x", "k": true}', 422, "invalid_request", "k"),
    (b'{"tenant": "a\\n", "query": "x"}', 422, "invalid_request", "tenant"),
    (b'{"tenant": "a", "query": "   "}', 422, "invalid_request", "query"),
    (b'{"tenant": "a", "query": "x", "filters": {"time_from": "yesterday"}}', 422, "invalid_request",
     "filters.time_from"),
    (b'{"tenant": "a", "query": "x", "filters": {"time_from": "0000-01-01T00:00:00"}}', 422, "invalid_request",
     "filters.time_from"),
    (b'{"tenant": "a", "query": "x", "surprise": 1}', 422, "invalid_request", "surprise"),
]


@pytest.mark.parametrize("body,status,code,words", BAD_BODIES, ids=[repr(b[0][:24]) for b in BAD_BODIES])
def test_malformed_search_bodies_are_4xx_naming_the_problem(open_server, body, status, code, words):
    reply = _post(open_server, "/v1/search", body)
    check_error_contract(reply)
    error = reply.json()["error"]
    assert (reply.status_code, error["code"]) == (status, code), reply.text
    assert words in error["message"] + " " + error.get("field", ""), reply.text


@pytest.mark.parametrize("path,body,field", [
    ("/v1/documents", {"tenant": "t", "partition": "p", "documents": [{"text": 7}]}, "documents[0].text"),
    ("/v1/documents", {"tenant": "t", "partition": "p", "documents": {"text": "x"}}, "documents"),
    ("/v1/documents", {"tenant": "t", "partition": "p", "documents": [{"text": "x", "metadata": [1]}]},
     "documents[0].metadata"),
    ("/v1/documents", {"tenant": "t", "partition": "p", "documents": [{"text": "x", "id": "a\nb"}]},
     "documents[0].id"),
    ("/v1/documents", {"tenant": "t", "partition": "p", "documents": []}, "documents"),
    ("/v1/ask", {"tenant": "t", "question": "x", "model": "huge"}, "model"),
    ("/v1/ask", {"tenant": "t", "question": ["x"]}, "question"),
    ("/v1/chat/completions", {"model": "auto", "messages": [{"role": "user", "content": 5}]}, "messages[0].content"),
    ("/v1/chat/completions", {"model": "auto", "messages": [{"role": "user", "content": [{"type": "text",
                                                                                       "text": 5}]}]},
     "messages[0].content"),
    ("/v1/chat/completions", {"model": "auto", "messages": [{"role": "system", "content": "x"}]}, "messages"),
    ("/v1/chat/completions", {"model": "auto", "messages": "hello"}, "messages"),
])
def test_wrong_types_name_the_field(open_server, path, body, field):
    reply = _post(open_server, path, json.dumps(body).encode())
    check_error_contract(reply)
    assert reply.status_code == 422 and reply.json()["error"]["field"] == field, reply.text


def test_huge_bodies_are_413(open_server):
    big = json.dumps({"tenant": "t", "partition": "p", "documents": [{"text": "x" * (MAX_BODY + 10)}]}).encode()
    declared = _post(open_server, "/v1/documents", big)
    assert declared.status_code == 413 and declared.json()["error"]["code"] == "body_too_large", declared.text
    assert str(MAX_BODY) in declared.json()["error"]["message"]

    def chunks():  # no Content-Length: the limit must hold while reading the stream
        for _ in range(2 * MAX_BODY // 4096 + 1):
            yield b" " * 4096

    streamed = httpx.post(open_server.url + "/v1/search", content=chunks(), timeout=60,
                          headers={"content-type": "application/json"})
    assert streamed.status_code == 413 and streamed.json()["error"]["code"] == "body_too_large", streamed.text


@pytest.mark.parametrize("method,path", [
    ("GET", "/v1/cache/entries?tenant=a&limit=%C2%B2"),  # "²": str.isdigit() says yes, int() says no
    ("GET", "/v1/cache/entries?tenant=a&limit=" + "1" * 5000),  # beyond int()'s 4300 digits
    ("GET", "/v1/cache/entries?tenant=a&limit=0"),
    ("DELETE", "/v1/cache/entries/%C2%B2?tenant=a"),
    ("DELETE", "/v1/cache/entries/" + "9" * 5000 + "?tenant=a"),
    ("DELETE", "/v1/cache/entries/-1?tenant=a"),
])
def test_integer_parameters_are_checked(open_server, method, path):
    reply = httpx.request(method, open_server.url + path, timeout=30)
    check_error_contract(reply)
    assert reply.status_code == 422, reply.text


def test_unrouted_requests_get_the_error_body(open_server):
    for method, path in [("GET", "/nope"), ("PUT", "/v1/search"), ("PUT", "/v1/documents"), ("POST", "/healthz"),
                         ("DELETE", "/v1/documents/a%0Ab")]:
        reply = httpx.request(method, open_server.url + path, timeout=30)
        assert reply.status_code in (404, 405), (method, path, reply.status_code)
        check_error_contract(reply)


def test_servers_survive_with_their_documents(open_server, keyed_server):
    """Runs last in this file: after everything above each server is healthy and its kept corpus unchanged."""
    for live in (open_server, keyed_server):
        with live.client() as c:
            assert c.get("/healthz").json() == {"status": "ok"}
            assert c.get("/readyz").status_code == 200
            parts = c.get("/v1/partitions", params={"tenant": KEEP_TENANT}).json()["partitions"]
            assert [(p["name"], p["version"]) for p in parts] == [(KEEP_PARTITION, 1)], parts
            for doc in live.kept[:5]:
                hits = c.post("/v1/search", json={"tenant": KEEP_TENANT, "query": doc["title"], "k": 3}).json()
                assert doc["id"] in [h["document_id"] for h in hits["results"]], (doc["title"], hits["results"])
