"""Request bodies off the event loop: each route's size limit, then parsing and validation on a few worker threads.

Parsing and checking JSON is CPU work proportional to the body (2 MB of `{"x":[0,0,...]}` held the event loop, and
with it /healthz, for about a second). Here it runs on `server.json_workers` threads of its own: a flood of bodies
queues for them instead of taking the threads that searches and caches use, and the loop keeps answering.
"""
from __future__ import annotations

import asyncio
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any, TypeVar

from ...config import ServerSettings, Settings
from .declare import build, shape_of, spec_of
from .requests import REQUEST_BODIES
from .validation import Spec, parse_json, validate

B = TypeVar("B")


@dataclass(frozen=True, slots=True)
class Body:
    """A route's body: its shape and the most bytes read of it (past that: 413 without reading further)."""
    spec: Spec
    max_bytes: int


@dataclass(frozen=True, slots=True)
class BodySpecs:
    """The request bodies (requests.py), built once from the settings: an upload may take megabytes, a question
    kilobytes."""
    bodies: dict[type, Body]

    @classmethod
    def from_settings(cls, settings: Settings) -> "BodySpecs":
        return cls({body: Body(spec_of(body, settings), _max_bytes(body, settings.server)) for body in REQUEST_BODIES})

    def __getitem__(self, body: type) -> Body:
        return self.bodies[body]


def _max_bytes(body: type, server: ServerSettings) -> int:
    limit = shape_of(body).max_bytes
    assert limit is not None, f"{body.__name__} declares no max_bytes"
    return limit(server)


def typed(body: type[B], value: dict[str, Any], server: ServerSettings) -> B:
    """The typed body of a validated value, checked for what its spec cannot say (`check`, where it has one)."""
    out = build(body, value)
    check = getattr(out, "check", None)
    if check is not None:
        check(server)
    return out


class BodyParser:
    """Parses and validates bodies on its own threads (stopped by `close`)."""

    def __init__(self, server: ServerSettings):
        self.max_values = server.max_json_values
        self._pool = ThreadPoolExecutor(server.json_workers, thread_name_prefix="json")

    async def parse(self, raw: bytes, spec: Spec, key_tenant: str | None) -> dict[str, Any]:
        """The body validated against `spec`, its tenant filled in from the API key's when it names none."""
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(self._pool, self._parse, raw, spec, key_tenant)

    def _parse(self, raw: bytes, spec: Spec, key_tenant: str | None) -> dict[str, Any]:
        body = parse_json(raw, self.max_values)
        if isinstance(body, dict) and key_tenant is not None and body.get("tenant") is None:
            body["tenant"] = key_tenant
        return validate(body, spec)

    def close(self) -> None:
        self._pool.shutdown(wait=False, cancel_futures=True)
