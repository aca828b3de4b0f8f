"""The hostile tenant: floods, oversized and malformed bodies, bodies trickled a byte at a time, requests with a
wrong key, for another tenant or for its cache entries, each at a bounded rate so the run measures the server's
defences rather than the load generator. Every outcome is recorded under `attack:<name>`."""
from __future__ import annotations

import asyncio
import json
import random
import time

import httpx

from .stats import Recorder

FLOOD_WORKERS = 8
TRICKLERS = 16


def all_attacks(server, rec: Recorder, until: float) -> list:
    key = server.keys["attacker"]
    return [*(_flood(server.url, key, rec, until) for _ in range(FLOOD_WORKERS)),
            *(_trickle(server.port, key, rec, until) for _ in range(TRICKLERS)),
            _every(2.0, until, lambda c: c.post("/v1/search", content=b'{"query": "' + b"a" * (2 << 20) + b'"}',
                                               headers={"content-type": "application/json"}), server, rec, "oversized"),
            _every(3.0, until, lambda c: c.post("/v1/search", content=_deep_array(200_000),
                                               headers={"content-type": "application/json"}), server, rec, "array"),
            _every(2.0, until, lambda c: c.post("/v1/documents", content=json.dumps(_doc()),
                                               headers={"content-type": "text/plain"}), server, rec, "text_plain"),
            _every(5.0, until, lambda c: c.post("/v1/chat/completions", json=_long_chat()), server, rec, "long_chat"),
            _every(2.0, until, lambda c: c.post("/v1/search", json={"tenant": "app", "query": "x"}), server, rec,
                   "other_tenant"),
            _every(2.0, until, lambda c: c.delete(f"/v1/cache/entries/{random.randint(1, 50)}"), server, rec,
                   "other_cache_entry"),
            _every(1.0, until, lambda c: c.post("/v1/search", json={"query": "x"},
                                               headers={"authorization": "Bearer wrong"}), server, rec, "bad_key")]


async def _flood(url: str, key: str, rec: Recorder, until: float) -> None:
    async with httpx.AsyncClient(base_url=url, headers={"authorization": f"Bearer {key}"}, timeout=30) as client:
        while time.monotonic() < until:
            await _outcome(rec, "attack:flood", client.post("/v1/search", json={"query": "flood", "k": 10}))
            await asyncio.sleep(0.1)


async def _every(period_s: float, until: float, send, server, rec: Recorder, name: str) -> None:
    headers = {"authorization": f"Bearer {server.keys['attacker']}"}
    async with httpx.AsyncClient(base_url=server.url, headers=headers, timeout=60) as client:
        while time.monotonic() < until:
            await _outcome(rec, f"attack:{name}", send(client))
            await asyncio.sleep(period_s)


async def _trickle(port: int, key: str, rec: Recorder, until: float) -> None:
    """Headers announce a body just under the search limit (64 KiB), then send a byte every half second: a slot
    held for as long as the server lets it."""
    head = (f"POST /v1/search HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: Bearer {key}\r\n"
            "Content-Type: application/json\r\nContent-Length: 60000\r\n\r\n").encode()
    await trickle(port, head, b" ", rec, until, "attack:trickle")


async def trickle(port: int, head: bytes, piece: bytes, rec: Recorder, until: float, kind: str) -> None:
    """Send `head`, then `piece` every half second until the server answers (or closes); record its status under
    `kind`, and start again."""
    while time.monotonic() < until:
        outcome = "closed"
        try:
            reader, writer = await asyncio.open_connection("127.0.0.1", port)
            writer.write(head)
            while time.monotonic() < until and not reader.at_eof():
                writer.write(piece)
                await writer.drain()
                try:
                    answer = await asyncio.wait_for(reader.read(64), 0.5)
                except asyncio.TimeoutError:
                    continue
                if answer:
                    outcome = answer.split(b" ")[1].decode(errors="replace") if b" " in answer else "answered"
                    break
            writer.close()
        except OSError as exc:
            outcome = type(exc).__name__
        rec.record(kind, outcome)
        await asyncio.sleep(0.5)


async def _outcome(rec: Recorder, kind: str, request) -> None:
    try:
        reply = await request
        rec.record(kind, str(reply.status_code))
    except httpx.HTTPError as exc:
        rec.record(kind, type(exc).__name__)


def _deep_array(n: int) -> bytes:
    return b'{"query": "x", "k": [' + b",".join([b"0"] * n) + b"]}"


def _doc() -> dict:
    return {"partition": "soak", "documents": [{"text": "cross-site write"}]}


def _long_chat() -> dict:
    return {"messages": [{"role": "user", "content": "why " * 50_000}, {"role": "user", "content": "and?"}]}
