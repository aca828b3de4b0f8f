"""Request bodies off the event loop: each route's size limit, then parsing and validation on a few worker threads.

Parsing and checking JSON is CPU work proportional to the body (2 MB of `{"x":[0,0,...]}` held the event loop, and
with it /healthz, for about a second). Here it runs on `server.json_workers` threads of its own: a flood of bodies
queues for them instead of taking the threads that searches and caches use, and the loop keeps answering.
"""
from __future__ import annotations

import asyncio
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

from ..config import ServerSettings, Settings
from .body_schemas import PARTITION_BODY, REINDEX_BODY, ask_body, chat_body, ingest_body, search_body
from .validation import Spec, parse_json, validate


@dataclass(frozen=True, slots=True)
class Body:
    """A route's body: its shape and the most bytes read of it (past that: 413 without reading further)."""
    spec: Spec
    max_bytes: int


@dataclass(frozen=True, slots=True)
class BodySpecs:
    """The request bodies, built once from the settings: an upload may take megabytes, a question kilobytes."""
    ingest: Body
    search: Body
    ask: Body
    chat: Body
    reindex: Body
    partition: Body

    @classmethod
    def from_settings(cls, settings: Settings) -> "BodySpecs":
        server = settings.server
        return cls(Body(ingest_body(settings), server.max_body_bytes),
                   Body(search_body(settings), server.max_query_body_bytes),
                   Body(ask_body(settings), server.max_chat_body_bytes),  # a question with its history
                   Body(chat_body(settings), server.max_chat_body_bytes),
                   Body(REINDEX_BODY, server.max_query_body_bytes),
                   Body(PARTITION_BODY, server.max_query_body_bytes))


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
