"""Answer routes: native /v1/ask (JSON or Server-Sent Events) and OpenAI-compatible /v1/chat/completions.

Both consume the same event sequence from the pipeline (sources, tokens, done or failed). A streaming client that
goes away leaves its response iterator to be closed; each layer closes the one below in `finally`, down to the
engine's stream, which aborts the generation.
"""
from __future__ import annotations

import json
import time
from collections.abc import AsyncIterator, Awaitable, Callable

from starlette.requests import Request
from starlette.responses import JSONResponse, StreamingResponse
from starlette.routing import Route

from ..answer import AskRequest, Done, Failed, Sources, Token
from ..config import Settings
from ..pipeline import Appliance
from ..retrieve import PartitionFilter
from .metrics import RequestRecord
from .schemas import ask_body, chat_body
from .validation import BadRequest, Spec

SSE_HEADERS = {"Cache-Control": "no-cache", "X-Accel-Buffering": "no"}


def answer_routes(settings: Settings, appliance: Appliance, read_body: Callable[[Request, Spec], Awaitable[dict]],
                  tenant_of: Callable[[Request, str | None, str], str], require_ready: Callable[[], None]) -> list[Route]:
    ask_spec, chat_spec = ask_body(settings), chat_body(settings)

    async def ask(request: Request):
        require_ready()
        body = await read_body(request, ask_spec)
        req = AskRequest(body["question"], _where(body["tenant"], body["partitions"]), body["model"],
                         body["max_tokens"], body["task"], request.state.request_id, body["timeout_s"])
        events = await _primed(_traced(appliance.ask(req), request.state.record))
        if body["stream"]:
            return StreamingResponse(_native_sse(events), media_type="text/event-stream",
                                     headers=SSE_HEADERS)
        return JSONResponse(await _collect_native(events, req.request_id))

    async def chat_completions(request: Request):
        require_ready()
        # OpenAI clients cannot easily add body fields: the tenant may come in a header (checked like a body field)
        header = request.headers.get("x-tenant")
        header_tenant = tenant_of(request, header, "X-Tenant") if header is not None else None
        body = await read_body(request, chat_spec)
        question = _last_user_message(body["messages"])
        if body["tenant"] is None:
            body["tenant"] = header_tenant or tenant_of(request, "default")
        req = AskRequest(question, _where(body["tenant"], body["partitions"]), body["model"],
                         body["max_completion_tokens"] or body["max_tokens"], "cited", request.state.request_id)
        events = await _primed(_traced(appliance.ask(req), request.state.record))
        chat_id, created = f"chatcmpl-{req.request_id}", int(time.time())
        if body["stream"]:
            return StreamingResponse(_openai_sse(events, chat_id, created, body["model"]),
                                     media_type="text/event-stream", headers=SSE_HEADERS)
        return JSONResponse(await _collect_openai(events, chat_id, created, body["model"]))

    async def models(request: Request) -> JSONResponse:
        engines = appliance.engines()
        data = [{"id": "auto", "object": "model", "created": 0, "owned_by": "rag-appliance",
                 "description": "the router picks small or large per question"}]
        for role in ("small", "large"):
            info = engines.get(role, {})
            data.append({"id": role, "object": "model", "created": 0, "owned_by": "rag-appliance",
                         "root": info.get("model"), "state": info.get("state", "disabled"),
                         "max_model_len": info.get("max_model_len")})
        return JSONResponse({"object": "list", "data": data})

    async def engines(request: Request) -> JSONResponse:
        return JSONResponse({"engines": appliance.engines()})

    return [
        Route("/v1/ask", ask, methods=["POST"]),
        Route("/v1/chat/completions", chat_completions, methods=["POST"]),
        Route("/v1/models", models, methods=["GET"]),
        Route("/v1/engines", engines, methods=["GET"]),
    ]


def _where(tenant: str, partitions: list[str] | None) -> PartitionFilter:
    return PartitionFilter(tenant=tenant, names=tuple(partitions) if partitions else None)


def _last_user_message(messages: list[dict]) -> str:
    for i in range(len(messages) - 1, -1, -1):
        if messages[i]["role"] != "user":
            continue
        content = messages[i].get("content")
        if isinstance(content, list):  # content parts: only text parts carry a question
            content = " ".join(p.get("text", "") for p in content if isinstance(p, dict) and p.get("type") == "text")
        if not isinstance(content, str) or not content.strip():
            raise BadRequest("the last user message has no text", f"messages[{i}].content")
        if len(content) > 4000:
            raise BadRequest(f"must have at most 4000 characters, got {len(content)}", f"messages[{i}].content")
        return content
    raise BadRequest("there is no user message to answer", "messages")


async def _traced(events: AsyncIterator, record: RequestRecord) -> AsyncIterator:
    """Pass the events on, noting in the request's record what answered it, for metrics and the request log."""
    async for event in events:
        if isinstance(event, Done):
            record.cache, record.degraded, record.finish_reason = event.cache, event.degraded, event.finish_reason
            record.route_engine, record.route_requested = event.route.engine, event.route.requested
            record.timings.update(event.timings)
        elif isinstance(event, Failed):
            record.error, record.route_engine = event.message, event.route.engine
        yield event


async def _primed(events: AsyncIterator) -> AsyncIterator:
    """Run the retrieval part before any byte is sent, so that its errors (bad partition, encoder queue full)
    still become a proper HTTP status instead of a stream cut short."""
    first = await events.__anext__()

    async def chained():
        try:
            yield first
            async for event in events:
                yield event
        finally:
            await events.aclose()
    return chained()


def _sse(event: str, data: dict) -> str:
    return f"event: {event}\ndata: {json.dumps(data, ensure_ascii=False)}\n\n"


async def _native_sse(events) -> AsyncIterator[str]:
    try:
        async for event in events:
            if isinstance(event, Sources):
                yield _sse("sources", {"sources": event.sources, "partitions": event.partitions,
                                       "route": event.route.as_dict()})
            elif isinstance(event, Token):
                yield _sse("token", {"text": event.text})
            elif isinstance(event, Done):
                yield _sse("done", _done_fields(event))
            elif isinstance(event, Failed):
                yield _sse("error", {"error": {"code": "engine_failed", "message": event.message},
                                     "route": event.route.as_dict()})
    finally:
        await events.aclose()


def _done_fields(done: Done) -> dict:
    return {"answer": done.text, "finish_reason": done.finish_reason, "degraded": done.degraded,
            "cache": done.cache, "route": done.route.as_dict(), "usage": done.usage, "timings_ms": done.timings}


async def _collect_native(events, request_id: str) -> dict:
    reply: dict = {"id": request_id}
    async for event in events:
        if isinstance(event, Sources):
            reply["sources"] = event.sources
            reply["partitions"] = event.partitions
        elif isinstance(event, Done):
            reply.update(_done_fields(event))
        elif isinstance(event, Failed):
            raise BadRequest(event.message, status=503, code="engine_failed")
    return reply


def _chunk(chat_id: str, created: int, model: str, delta: dict, finish: str | None, **extra) -> str:
    body = {"id": chat_id, "object": "chat.completion.chunk", "created": created, "model": model,
            "choices": [{"index": 0, "delta": delta, "finish_reason": finish}], **extra}
    return f"data: {json.dumps(body, ensure_ascii=False)}\n\n"


async def _openai_sse(events, chat_id: str, created: int, model: str) -> AsyncIterator[str]:
    try:
        async for event in events:
            if isinstance(event, Sources):
                yield _chunk(chat_id, created, model, {"role": "assistant", "content": ""}, None,
                             sources=event.sources)
            elif isinstance(event, Token):
                yield _chunk(chat_id, created, model, {"content": event.text}, None)
            elif isinstance(event, Done):
                if event.degraded:  # the retrieval-only text is the answer a client shows
                    yield _chunk(chat_id, created, model, {"content": event.text}, None)
                yield _chunk(chat_id, created, model, {}, _openai_finish(event.finish_reason),
                             usage=_openai_usage(event.usage), route=event.route.as_dict(),
                             degraded=event.degraded, cache=event.cache, timings_ms=event.timings)
            elif isinstance(event, Failed):
                yield f"data: {json.dumps({'error': {'message': event.message, 'type': 'engine_failed'}})}\n\n"
                return
        yield "data: [DONE]\n\n"
    finally:
        await events.aclose()


async def _collect_openai(events, chat_id: str, created: int, model: str) -> dict:
    native = await _collect_native(events, chat_id)
    return {
        "id": chat_id, "object": "chat.completion", "created": created, "model": model,
        "choices": [{"index": 0, "message": {"role": "assistant", "content": native.get("answer", "")},
                     "finish_reason": _openai_finish(native.get("finish_reason"))}],
        "usage": _openai_usage(native.get("usage", {})),
        "sources": native.get("sources", []), "route": native.get("route"), "degraded": native.get("degraded"),
        "cache": native.get("cache"), "timings_ms": native.get("timings_ms"),
    }


def _openai_finish(reason: str | None) -> str:
    return "length" if reason == "length" else "stop"


def _openai_usage(usage: dict) -> dict:
    return {"prompt_tokens": usage.get("prompt_tokens", 0), "completion_tokens": usage.get("completion_tokens", 0),
            "total_tokens": usage.get("total_tokens", 0),
            "prompt_tokens_details": {"cached_tokens": usage.get("cached_prompt_tokens", 0)}}
