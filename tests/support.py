"""Helpers shared by the tests: settings, data slices from ../shared/data, a live server on loopback."""
from __future__ import annotations

import asyncio
import json
import socket
import threading
import time
from dataclasses import replace
from pathlib import Path

import httpx
import uvicorn

from appliance.cluster.wire import box_tls
from appliance.config import Settings, load_settings
from appliance.evaluate import BeirData, load_beir

ROOT = Path(__file__).resolve().parent.parent
DATA = ROOT.parent / "shared" / "data"
SCIFACT = DATA / "beir_scifact"
CMRC = DATA / "cmrc2018_retrieval_zh"


def make_settings(data_dir: Path, models_dir: Path, **env: str) -> Settings:
    # Engines start only where a test asks for them (llm_settings): each costs ~20 s and ~2 GB.
    # The relevance floor is off unless a test asks for it (llm_served runs with the product's default): most
    # tests ask about the answer path's logic with questions no passage needs to cover.
    base = {"APPLIANCE_DATA_DIR": str(data_dir), "APPLIANCE_MODELS_DIR": str(models_dir),
            "APPLIANCE_DEMO_CORPUS": "false", "APPLIANCE_GENERATE_ENABLED": "false",
            "APPLIANCE_GENERATE_MIN_RELEVANCE": "0"}
    base.update({f"APPLIANCE_{k.upper()}": v for k, v in env.items()})
    return load_settings(env=base)


def beir_slice(folder: Path, queries: int, distractors: int) -> BeirData:
    """The first `queries` judged queries, their relevant documents and `distractors` other documents."""
    data = load_beir(folder)
    chosen = dict(list(data.queries.items())[:queries])
    relevant = {doc for q in chosen for doc in data.qrels[q]}
    corpus = [d for d in data.corpus if str(d["_id"]) in relevant]
    corpus += [d for d in data.corpus if str(d["_id"]) not in relevant][:distractors]
    return BeirData(corpus, chosen, {q: data.qrels[q] for q in chosen})


def run(coro):
    return asyncio.run(coro)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class LiveServer:
    """A real uvicorn server on a free loopback port, in a thread of this process, with the options `appliance
    serve` gives uvicorn. `open_services` replaces the real services (e.g. scripted engines)."""

    def __init__(self, settings: Settings, api_key: str | None = None, open_services=None, port: int | None = None):
        self.api_key = api_key  # sent by client() when the server has API keys
        self.port = port or free_port()
        self.settings = replace(settings, server=replace(settings.server, host="127.0.0.1", port=self.port))
        from appliance.serve import create_app, server_options

        self.app = create_app(self.settings, *((open_services,) if open_services else ()))
        config = uvicorn.Config(self.app, log_level="warning", lifespan="on", **server_options(self.settings))
        self.server = uvicorn.Server(config)
        self.thread = threading.Thread(target=self.server.run, daemon=True)
        # a box serving HTTPS (server.tls_cert_file) is checked against the site's CA (cluster.ca_file)
        tls = bool(settings.server.tls_cert_file)
        self.url = f"{'https' if tls else 'http'}://127.0.0.1:{self.port}"
        self.verify = box_tls(settings.cluster.ca_file)

    def __enter__(self) -> "LiveServer":
        self.start()
        self.wait_ready()
        return self

    def start(self) -> None:
        self.thread.start()

    def wait_ready(self, timeout: float = 600) -> None:
        deadline = time.time() + timeout
        while time.time() < deadline:
            try:
                if httpx.get(self.url + "/readyz", timeout=2, verify=self.verify).status_code == 200:
                    return
            except httpx.HTTPError:
                pass
            time.sleep(0.2)
        raise TimeoutError("server did not become ready")

    def call(self, coro, timeout: float = 120):
        """Run a coroutine on the server's event loop (where its engines live) and return its result."""
        loop = self.server.servers[0].get_loop()
        return asyncio.run_coroutine_threadsafe(coro, loop).result(timeout)

    def client(self, key: str | None = None) -> httpx.Client:
        key = key or self.api_key
        headers = {"Authorization": f"Bearer {key}"} if key else {}
        return httpx.Client(base_url=self.url, timeout=120, headers=headers, verify=self.verify)

    def __exit__(self, *exc) -> None:
        self.server.should_exit = True
        self.thread.join(timeout=30)


def write_keys(folder: Path, tenants: list[str], admin: bool = False) -> tuple[Path, dict[str, str]]:
    """An API keys file with one new key per tenant (and an admin key, as "admin", if asked); returns the file and
    tenant -> key."""
    from appliance.serve.admission.keys import add_key

    path = folder / "keys.toml"
    keys = {tenant: add_key(path, tenant, f"test {tenant}") for tenant in tenants}
    if admin:
        keys["admin"] = add_key(path, None, "test admin")
    return path, keys


def observe_boot(live: LiveServer, timeout: float = 900) -> dict:
    """Poll a starting server until ready; record what /healthz, /readyz and /v1/ask answered meanwhile."""
    seen: dict = {"healthz": set(), "readyz": set(), "ask_while_starting": set()}
    deadline = time.time() + timeout
    while time.time() < deadline:
        try:
            seen["healthz"].add(httpx.get(live.url + "/healthz", timeout=5).status_code)
            ready = httpx.get(live.url + "/readyz", timeout=5)
            seen["readyz"].add(ready.status_code)
            if ready.status_code == 200:
                seen["ready"] = ready.json()
                return seen
            if ready.json().get("status") == "failed":
                raise RuntimeError(f"boot failed: {ready.json()}")
            with live.client() as c:
                ask = c.post("/v1/ask", json={"tenant": "default", "question": "hi"}, timeout=5)
            if ask.status_code == 200 and httpx.get(live.url + "/readyz", timeout=5).status_code == 200:
                continue  # it became ready between the two calls: the next round records it as ready
            seen["ask_while_starting"].add(ask.status_code)
        except httpx.HTTPError:
            pass
        time.sleep(0.5)
    raise TimeoutError("server did not become ready")


def partition_route_refusals(suffix: str, valid: dict) -> list[tuple[str, bytes, int, str | None]]:
    """(path, body, status, field at fault) that a JSON route on /v1/partitions/{name}{suffix} refuses for tenant
    alpha, who owns `papers` (beta owns `notes`): unreadable bodies, another or a malformed tenant, an oversized
    body, and a partition that is unknown, another tenant's, or badly named. `valid`: a body the route accepts."""
    path = f"/v1/partitions/papers{suffix}"

    def body(**extra) -> bytes:
        return json.dumps(valid | extra).encode()

    return [(path, b"{", 400, None), (path, b"\xff\xfe", 400, None), (path, b"", 400, None), (path, b"[]", 422, "body"),
            (path, body(tenant="beta"), 403, "tenant"), (path, body(tenant="../x"), 422, "tenant"),
            (path, body(x="y" * 70_000), 413, None), (f"/v1/partitions/nope{suffix}", body(), 404, "name"),
            (f"/v1/partitions/notes{suffix}", body(), 404, "name"),  # beta's: alpha's key sees no such partition
            (f"/v1/partitions/bad%20name{suffix}", body(), 422, "name")]


def assert_refused_unchanged(live: LiveServer, method: str, path: str, body: bytes, status: int, field: str | None,
                             seen) -> None:
    """Send `body` as JSON with `live`'s key: it must be refused with `status`, its error naming `field`, and what
    `seen()` reads of the server must be the same afterwards."""
    before = seen()
    with live.client() as c:
        reply = c.request(method, path, content=body, headers={"content-type": "application/json"})
    assert reply.status_code == status, reply.text
    error = reply.json()["error"]
    assert error.get("field") == field and error["message"], error
    assert seen() == before, "a refused request changed nothing"
