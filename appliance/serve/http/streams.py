"""The answer path's events (sources, tokens, done or failed) as HTTP: native SSE, OpenAI chunks, or one answer.

A streaming client that goes away leaves its response iterator to be closed; each layer here closes the one
below in `finally`, down to the engine's stream, which aborts the generation.
"""
from __future__ import annotations

import json
from collections.abc import AsyncIterator
from typing import Any

from ...answers import Done, Event, Failed, Sources, Token
from ..observe.metrics import RequestRecord
from .errors import ApiError
from .responses import (Answer, ChatMeta, chat_chunk_json, chat_last_chunk_json, done_json, failed_json,
                        sources_json, source_json)

SSE_HEADERS = {"Cache-Control": "no-cache", "X-Accel-Buffering": "no"}


async def traced(events: AsyncIterator[Event], record: RequestRecord) -> AsyncIterator[Event]:
    """Pass the events on, noting in the request's record what answered it, for metrics and the request log."""
    async for event in events:
        if isinstance(event, Done):
            record.cache, record.degraded, record.finish_reason = event.cache, event.degraded, event.finish_reason
            record.grounding = event.grounding.label if event.grounding is not None else None
            record.route_engine, record.route_requested = event.route.engine, event.route.requested
            record.timings.update(event.timings.as_dict())
        elif isinstance(event, Failed):
            record.error, record.route_engine = event.message, event.route.engine
        yield event


async def primed(events: AsyncIterator[Event]) -> AsyncIterator[Event]:
    """Run the retrieval part before any byte is sent, so that its errors (bad partition, encoder queue full)
    still become a proper HTTP status instead of a stream cut short."""
    first = await events.__anext__()

    async def chained() -> AsyncIterator[Event]:
        try:
            yield first
            async for event in events:
                yield event
        finally:
            await events.aclose()  # type: ignore[attr-defined]
    return chained()


async def collect(events: AsyncIterator[Event]) -> Answer:
    """The whole answer; an engine that died mid-answer is a 503 (nothing was sent yet, a retry may succeed)."""
    sources: Sources | None = None
    async for event in events:
        if isinstance(event, Sources):
            sources = event
        elif isinstance(event, Done) and sources is not None:
            return Answer(sources, event)
        elif isinstance(event, Failed):
            raise ApiError.unavailable("engine_failed", event.message)
    raise ApiError.unavailable("engine_failed", "the answer ended before it was complete")


def _sse(event: str, data: dict[str, Any]) -> str:
    return f"event: {event}\ndata: {json.dumps(data, ensure_ascii=False)}\n\n"


def _data(data: dict[str, Any] | str) -> str:
    return f"data: {data if isinstance(data, str) else json.dumps(data, ensure_ascii=False)}\n\n"


async def native_sse(events: AsyncIterator[Event]) -> AsyncIterator[str]:
    try:
        async for event in events:
            if isinstance(event, Sources):
                yield _sse("sources", sources_json(event))
            elif isinstance(event, Token):
                yield _sse("token", {"text": event.text})
            elif isinstance(event, Done):
                yield _sse("done", done_json(event))
            elif isinstance(event, Failed):
                yield _sse("error", failed_json(event))
    finally:
        await events.aclose()  # type: ignore[attr-defined]


async def openai_sse(events: AsyncIterator[Event], chat: ChatMeta) -> AsyncIterator[str]:
    try:
        async for event in events:
            if isinstance(event, Sources):
                yield _data(chat_chunk_json(chat, {"role": "assistant", "content": ""}, None,
                                            sources=[source_json(s) for s in event.sources],
                                            standalone_question=event.standalone_question))
            elif isinstance(event, Token):
                yield _data(chat_chunk_json(chat, {"content": event.text}, None))
            elif isinstance(event, Done):  # every answer's text came as tokens (refusals and degraded ones too)
                yield _data(chat_last_chunk_json(chat, event))
            elif isinstance(event, Failed):
                yield _data({"error": {"message": event.message, "type": "engine_failed"}})
                return  # no [DONE]: the completion is incomplete
        yield _data("[DONE]")
    finally:
        await events.aclose()  # type: ignore[attr-defined]
