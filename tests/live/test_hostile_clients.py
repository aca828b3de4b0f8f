"""Hostile clients on loopback (issue 10): what an attacker would send, while a normal client keeps polling /healthz
and a small search. The normal client's p99 must stay within a generous factor of its own baseline, measured just
before in the same test (absolute timings would flake on a loaded box); every hostile request gets its 4xx.

One real server with scripted engines (real retriever, real router, SmolLM2's tokenizer; no vLLM): the answer
path's CPU work (routing, prompt building) runs as in production.
"""
from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import json
import math
import shlex
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest
from openai import OpenAI

from appliance.answers import Answerer
from appliance.generate import EngineSet
from appliance.router import Router
from appliance.wiring import load_router, open_services
from scripted import ScriptedEngine
from support import ROOT, LiveServer, make_settings, write_keys

NORMAL, HOSTILE = "normal", "hostile"
DOCS = [{"id": "pump", "title": "Pump", "text": "Error code XK-4471 means the pump's pressure sensor failed."},
        {"id": "cells", "title": "Cells", "text": "The mitochondria produce most of the energy a cell uses."}]
BLOB = "x" * 1_000_000  # no spaces: one chunk of a megabyte, in every prompt that retrieves it
BASELINE_N, ATTACK_S, WORKERS = 40, 4.0, 3
INTERVAL_S = 0.1  # per hostile thread: the attack is the server's work per request, not the loopback's bandwidth
FACTOR = 20  # generous: before the fixes its p99 under these attacks was ~250x its baseline (after: ~1x)
MB2 = 2 * 1024 * 1024
JSON = {"content-type": "application/json"}
HERE = Path(__file__).resolve().parents[1]  # tests/, where hostile_driver.py is


def _on_event_loop() -> bool:
    try:
        asyncio.get_running_loop()
        return True
    except RuntimeError:
        return False


class Watched:
    """Counts calls of one kind of CPU work, and those made on an event loop thread."""

    def __init__(self) -> None:
        self.calls = self.on_loop = 0

    def note(self) -> None:
        self.calls += 1
        self.on_loop += _on_event_loop()


class WatchedTokenizer:
    def __init__(self, inner) -> None:
        self.inner, self.watch = inner, Watched()

    def encode(self, *args, **kwargs):
        self.watch.note()
        return self.inner.encode(*args, **kwargs)

    def __getattr__(self, name: str):
        return getattr(self.inner, name)


class WatchedRouter(Router):
    def __init__(self, weights) -> None:
        super().__init__(weights)
        self.watch = Watched()

    def decide(self, *args, **kwargs):
        self.watch.note()
        return super().decide(*args, **kwargs)


def scripted_services(tokenizer, router):
    @contextlib.asynccontextmanager
    async def open_(settings):
        async with open_services(settings, warm_up=False, generation=False) as services:
            engines = EngineSet({role: ScriptedEngine(role, tokenizer) for role in ("small", "large")},
                                restart_delay_s=0.01)
            await engines.start()
            try:
                routers = {router.embedder: router} if router is not None else {}
                answers = Answerer(services.retriever, engines, routers, settings.generate, settings.router, 60.0)
                yield dataclasses.replace(services, answers=answers, engines=engines)
            finally:
                await engines.stop()
    return open_


@pytest.fixture(scope="module")
def hostile(tmp_path_factory, models_dir):
    from transformers import AutoTokenizer

    settings = make_settings(tmp_path_factory.mktemp("hostile"), models_dir, admission_rate_per_s="100000",
                             admission_burst="100000")
    tokenizer = WatchedTokenizer(AutoTokenizer.from_pretrained(str(models_dir / "build" / "smollm2")))
    trained = load_router(settings)  # None where the build had no router data: routing is then by length
    router = WatchedRouter(trained.weights) if trained is not None else None
    with LiveServer(settings, open_services=scripted_services(tokenizer, router)) as live:
        live.tokenizer, live.router = tokenizer, router
        with live.client() as c:
            for tenant, docs in ((NORMAL, DOCS), (HOSTILE, [{"id": "blob", "text": BLOB}])):
                reply = c.post("/v1/documents", json={"tenant": tenant, "partition": "kb", "documents": docs})
                assert reply.status_code == 200, reply.text
        yield live


def _normal_request(client: httpx.Client, n: int) -> float:
    started = time.perf_counter()
    if n % 2:
        reply = client.post("/v1/search", json={"tenant": NORMAL, "query": "what does XK-4471 mean?", "k": 3})
    else:
        reply = client.get("/healthz")
    assert reply.status_code == 200, reply.text
    return time.perf_counter() - started


def p99(values: list[float]) -> float:
    ordered = sorted(values)
    return ordered[max(0, math.ceil(0.99 * len(ordered)) - 1)]


def under_attack(live: LiveServer, requests: list[dict]) -> list[dict]:
    """The normal client alone (baseline), then while a hostile client (tests/hostile_driver.py, a process of its
    own) sends `requests` round-robin from WORKERS threads for ATTACK_S: the normal client's p99 must stay within
    FACTOR of its baseline. Returns the hostile replies as the driver reports them."""
    plan = json.dumps({"url": live.url, "seconds": ATTACK_S, "workers": WORKERS, "interval_s": INTERVAL_S,
                       "requests": requests})
    with httpx.Client(base_url=live.url, timeout=120) as normal:
        baseline = [_normal_request(normal, n) for n in range(BASELINE_N)]
        with subprocess.Popen([sys.executable, str(HERE / "hostile_driver.py")], stdin=subprocess.PIPE,
                              stdout=subprocess.PIPE, text=True, encoding="latin-1") as driver:
            driver.stdin.write(plan)
            driver.stdin.close()
            assert driver.stdout.readline().strip() == "GO"
            loaded, end = [], time.perf_counter() + ATTACK_S
            while time.perf_counter() < end:
                loaded.append(_normal_request(normal, len(loaded)))
            replies = [json.loads(line) for line in driver.stdout]
    print(f"\nnormal client p99: {p99(baseline) * 1e3:.0f} ms alone, {p99(loaded) * 1e3:.0f} ms under attack "
          f"({len(loaded)} requests; {len(replies)} hostile)")
    assert driver.returncode == 0 and replies, "the hostile client failed"
    assert p99(loaded) <= FACTOR * p99(baseline), (p99(baseline), p99(loaded), len(loaded))
    return replies


def _request(method: str, path: str, body: bytes | str | dict | None = None, headers: dict | None = None,
             tag: str | None = None, chunked: bool = False) -> dict:
    """One request as the hostile driver takes it (a dict body is sent as JSON)."""
    if isinstance(body, dict):
        body, headers = json.dumps(body), {**JSON, **(headers or {})}
    if isinstance(body, bytes):
        body = body.decode("latin-1")
    return {"method": method, "path": path, "headers": headers or {}, "body": body, "chunked": chunked, "tag": tag}


def _error(reply: dict) -> dict:
    assert reply["type"].startswith("application/json"), reply
    error = reply["json"]["error"]
    assert error["code"] and error["message"], reply
    return error


# -- stalls: JSON bodies, passages, routing ------------------------------------------------------------------------

VALUES_2MB = b'{"x":[' + b"0," * (MB2 // 2 - 8) + b"0]}"  # ~1M values: seconds of parsing and checking
LISTS_2MB = (b'{"tenant":"t","partition":"p","documents":[{"text":"x","metadata":{"a":['
             + b"[]," * (MB2 // 3 - 40) + b"[]]}}]}")
# as many values as server.max_json_values allows: parsed, then refused as metadata over its size
LISTS_AT_LIMIT = (b'{"tenant":"t","partition":"p","documents":[{"text":"x","metadata":{"a":['
                  + b"[]," * 24_950 + b"[]]}}]}")  # each [] and each comma counts
HOSTILE_BODIES = [
    _request("POST", "/v1/search", VALUES_2MB, JSON),
    _request("POST", "/v1/search", VALUES_2MB, JSON, chunked=True),
    _request("POST", "/v1/documents", LISTS_2MB, JSON),
    _request("POST", "/v1/ask", VALUES_2MB, JSON),
    _request("POST", "/v1/chat/completions", VALUES_2MB, JSON),
    _request("POST", "/v1/documents", LISTS_AT_LIMIT, JSON),
]


def test_a_flood_of_2mb_json_bodies_stalls_no_one(hostile):
    replies = under_attack(hostile, HOSTILE_BODIES)
    for reply in replies:
        assert reply["status"] in (413, 422), reply
        _error(reply)
    kinds = {_error(r)["code"] for r in replies}
    assert {"body_too_large", "too_many_values"} <= kinds, kinds
    with hostile.client() as c:  # and a body under the limits still goes through
        assert c.post("/v1/search", json={"tenant": NORMAL, "query": "XK-4471"}).status_code == 200


def _multipart(files: list[tuple[str, bytes]], partition: str = "uploads") -> tuple[bytes, dict]:
    parts = [b'--B\r\nContent-Disposition: form-data; name="tenant"\r\n\r\n' + HOSTILE.encode() + b"\r\n",
             b'--B\r\nContent-Disposition: form-data; name="partition"\r\n\r\n' + partition.encode() + b"\r\n"]
    parts += [b'--B\r\nContent-Disposition: form-data; name="file"; filename="' + name.encode() + b'"\r\n\r\n'
              + data + b"\r\n" for name, data in files]
    return b"".join(parts) + b"--B--\r\n", {"content-type": "multipart/form-data; boundary=B"}


def _hostile_uploads() -> list[dict]:
    from hostile_files import SCIFACT_FILES, truncated, zip_bomb_docx

    nav = "".join(f'<li><a href="/p{i}">Link {i}</a></li>' for i in range(40_000))  # ~1.3 MB of boilerplate
    page = (f"<html><body><nav><ul>{nav}</ul></nav><main><h1>Valves</h1><p>Valve V-{{n}} opens at 3 bar.</p>"
            f"</main></body></html>")
    pdf = next(SCIFACT_FILES.glob("*.pdf")).read_bytes()
    uploads = [_multipart([(f"page{n}.html", page.replace("{n}", str(n)).encode())]) for n in range(3)]
    uploads += [_multipart([("bomb.docx", zip_bomb_docx(1024)), ("cut.pdf", truncated(pdf))])]
    malformed = (b"--B\r\nContent-Disposition: form-data; name=\"file\"; filename=\"x.txt\"\r\n\r\n"
                 + b"x" * MB2)  # never closed
    uploads += [(malformed, {"content-type": "multipart/form-data; boundary=B"})]
    return [_request("POST", "/v1/files", body, headers) for body, headers in uploads]


def test_a_flood_of_uploads_to_parse_stalls_no_one(hostile):
    """Multipart bodies of megabytes: boilerplate-heavy pages the parsers must read through, zip bombs, truncated
    PDFs and a body that never ends; the normal client does not notice."""
    replies = under_attack(hostile, _hostile_uploads())
    statuses = {r["status"] for r in replies}
    assert statuses <= {200, 202, 400, 413, 422}, statuses  # 202: stored, another upload's build still running
    assert 200 in statuses and (413 in statuses or 422 in statuses), statuses
    for reply in replies:
        if reply["status"] not in (200, 202):  # 202 answers per file, like 200
            _error(reply)
    with hostile.client() as c:
        listing = c.get("/v1/documents", params={"tenant": HOSTILE, "partition": "uploads"}).json()["documents"]
        hits = c.post("/v1/search", json={"tenant": HOSTILE, "query": "valve opens at 3 bar", "k": 1}).json()
    assert {d["id"] for d in listing} <= {"page0.html", "page1.html", "page2.html"}, "bad files stored nothing"
    assert hits["results"][0]["text"].startswith("Valve V-") and "Link" not in hits["results"][0]["text"]


def test_uploads_whose_data_repeats_the_boundary_stall_no_one(hostile):
    """File data that repeats the delimiter followed by a wrong byte: python-multipart, on the event loop, worked
    through it byte by byte (~9 ms per 64 KiB here, ~25 ms on a slower box: ~280 ms per 2 MiB body that every
    other request waited out). The reader refuses it at its first such delimiter."""
    data = b"\r\n--B!" * (MB2 // 6)
    body = b'--B\r\nContent-Disposition: form-data; name="file"; filename="x.txt"\r\n\r\n' + data + b"\r\n--B--\r\n"
    replies = under_attack(hostile, [_request("POST", "/v1/files", body,
                                              {"content-type": "multipart/form-data; boundary=B"})])
    assert {r["status"] for r in replies} == {400}, {r["status"] for r in replies}
    assert {_error(r)["code"] for r in replies} == {"invalid_multipart"}


def test_megabyte_passages_and_routing_stay_off_the_event_loop(hostile):
    tokenizer = hostile.tokenizer.watch
    router = hostile.router.watch if hostile.router is not None else Watched()
    before = tokenizer.calls, router.calls
    replies = under_attack(hostile, [_request("POST", "/v1/ask", {
        "tenant": HOSTILE, "question": f"what is in the x file number {n}?", "partitions": ["kb"]}) for n in range(5)])
    assert all(r["status"] == 200 for r in replies), {r["status"] for r in replies}
    assert replies[0]["json"]["sources"][0]["document_id"] == "blob" and not replies[0]["json"]["degraded"]
    assert tokenizer.calls > before[0], "no prompt was made"
    assert router.calls > before[1] or hostile.router is None, "no route was decided"
    assert tokenizer.on_loop == 0 and router.on_loop == 0, (tokenizer.on_loop, router.on_loop)


def test_every_chat_message_is_bounded(hostile):
    server = hostile.settings.server
    long = "a" * (server.max_chat_message_chars + 1)
    ask = {"role": "user", "content": "what does XK-4471 mean?"}
    cases = [  # (messages, the field the error names)
        ([{"role": "system", "content": long}, ask], "messages[0].content"),
        ([ask, {"role": "assistant", "content": [{"type": "text", "text": long}]}, ask], "messages[1].content"),
        ([{"role": "assistant", "content": [{"type": "text", "text": 5}]}, ask], "messages[0].content"),
        ([{"role": "assistant", "content": {"text": "x"}}, ask], "messages[0].content"),
        ([{"role": "user", "content": "b" * (server.max_chat_message_chars - 10)}] * 5 + [ask], "messages"),
    ]
    replies = under_attack(hostile, [_request("POST", "/v1/chat/completions", {"model": "auto", "messages": m},
                                              {"X-Tenant": NORMAL}, tag=field) for m, field in cases])
    for reply in replies:
        assert reply["status"] == 422 and _error(reply)["field"] == reply["tag"], reply
    with hostile.client() as c:  # a long system prompt within the bounds is fine
        ok = c.post("/v1/chat/completions", headers={"X-Tenant": NORMAL}, json={
            "model": "auto", "messages": [{"role": "system", "content": "Be helpful. " * 1000}, ask]})
    assert ok.status_code == 200 and ok.json()["choices"][0]["message"]["content"], ok.text[:300]


# -- a web page as a client ------------------------------------------------------------------------------------------

def _partitions(live: LiveServer, tenant: str) -> list:
    with live.client() as c:
        return c.get("/v1/partitions", params={"tenant": tenant}).json()["partitions"]


PLANTED = json.dumps({"tenant": "victim", "partition": "p", "documents": [{"text": "planted"}]})


def test_cross_site_simple_posts_are_refused_and_store_nothing(hostile):
    types = ["text/plain", "text/plain;charset=UTF-8", "application/x-www-form-urlencoded",
             "multipart/form-data; boundary=x", None]
    replies = under_attack(hostile, [_request("POST", "/v1/documents", PLANTED, {"content-type": t} if t else {})
                                     for t in types])
    for reply in replies:
        assert reply["status"] == 415 and _error(reply)["field"] == "Content-Type", reply
    assert _partitions(hostile, "victim") == []
    with hostile.client() as c:  # a charset parameter and any capitalisation are fine
        ok = c.post("/v1/search", content=b'{"tenant": "normal", "query": "pump"}',
                    headers={"Content-Type": "Application/JSON; charset=utf-8"})
    assert ok.status_code == 200, ok.text


FOREIGN = [  # (method, path, headers, the header the error names)
    ("GET", "/v1/partitions?tenant=normal", {"Host": "evil.example"}, "Host"),
    ("GET", "/metrics", {"Host": "evil.example:8080"}, "Host"),
    ("GET", "/openapi.json", {"Host": "127.0.0.1.evil.example"}, "Host"),
    ("POST", "/v1/search", {"Host": "rebound.example", **JSON}, "Host"),
    ("POST", "/v1/documents", {"Origin": "http://evil.example", **JSON}, "Origin"),
    ("POST", "/v1/files", {"Origin": "http://evil.example", "content-type": "multipart/form-data; boundary=x"},
     "Origin"),  # what a cross-site form upload sends
    ("POST", "/v1/ask", {"Origin": "null", **JSON}, "Origin"),
    ("GET", "/v1/partitions?tenant=normal", {"Origin": "https://localhost.evil.example"}, "Origin"),
    # another port of the server's own host is another site (a dev server's page), as is a scheme not the web's
    ("GET", "/v1/partitions?tenant=normal", {"Origin": "http://localhost:3000"}, "Origin"),
    ("POST", "/v1/documents", {"Origin": "http://127.0.0.1:3000", **JSON}, "Origin"),
    ("GET", "/v1/partitions?tenant=normal", {"Origin": "http://localhost"}, "Origin"),
    ("GET", "/v1/partitions?tenant=normal", {"Origin": "ftp://localhost"}, "Origin"),
]


def test_foreign_hosts_and_origins_are_refused(hostile):
    replies = under_attack(hostile, [_request(method, path, PLANTED if method == "POST" else None, headers, field)
                                     for method, path, headers, field in FOREIGN])
    for reply in replies:
        assert reply["status"] == 403 and _error(reply)["field"] == reply["tag"], reply
    assert _partitions(hostile, "victim") == []
    port = hostile.port
    with hostile.client() as c:
        for headers in ({"Host": f"localhost:{port}"}, {"Host": f"[::1]:{port}"}, {"Host": "127.0.0.2"},
                        {"Origin": f"http://localhost:{port}"}, {"Origin": f"http://127.0.0.1:{port}"},
                        {"Host": f"[::1]:{port}", "Origin": f"http://[::1]:{port}"},
                        {"Host": "localhost", "Origin": "https://localhost"}):  # behind a TLS proxy
            assert c.get("/v1/partitions", params={"tenant": NORMAL}, headers=headers).status_code == 200, headers


def _readme_curls() -> list[str]:
    """The README's curl examples, one command each (continuation lines joined)."""
    text = (ROOT / "README.md").read_text(encoding="utf-8").replace("\\\n", " ")
    return [line.split("#")[0].strip() for line in text.splitlines() if line.strip().startswith("curl ")]


def test_readme_curl_examples_and_the_openai_client_still_work(hostile, tmp_path, models_dir):
    keys_file, keys = write_keys(tmp_path, ["default"])
    settings = make_settings(tmp_path, models_dir, admission_keys_file=str(keys_file),
                             server_allowed_hosts="appliance.internal, 10.0.0.5")
    curls = _readme_curls()
    assert len(curls) == 2 and "content-type: application/json" in curls[0].lower(), curls
    with LiveServer(settings) as keyed:
        for command, live in ((curls[0], hostile), (curls[1], keyed)):
            command = command.replace("localhost:8080", f"localhost:{live.port}")
            out = subprocess.run(["bash", "-c", command], capture_output=True, text=True, timeout=120,
                                 env={"KEY": keys["default"], "PATH": "/usr/bin:/bin"})
            assert out.returncode == 0 and ('"answer"' in out.stdout or "event: done" in out.stdout), \
                (shlex.split(command)[:3], out.stdout[-500:], out.stderr[-500:])
        with keyed.client(keys["default"]) as c:  # hosts named in server.allowed_hosts are served
            for headers in ({"Host": "appliance.internal:8080"}, {"Host": "APPLIANCE.INTERNAL."},
                            {"Host": "10.0.0.5", "Origin": "http://appliance.internal"}):
                assert c.get("/v1/partitions", headers=headers).status_code == 200, headers
            assert c.get("/v1/partitions", headers={"Host": "10.0.0.6"}).status_code == 403
    client = OpenAI(base_url=hostile.url + "/v1", api_key="open-mode", max_retries=0,
                    default_headers={"X-Tenant": NORMAL})
    reply = client.chat.completions.create(model="auto", messages=[{"role": "user", "content": "What is XK-4471?"}])
    assert reply.choices[0].message.content == "The answer."
    streamed = client.chat.completions.create(model="large", stream=True,
                                              messages=[{"role": "user", "content": "What is XK-4471?"}])
    assert "".join(ch.choices[0].delta.content or "" for ch in streamed) == "The answer."
