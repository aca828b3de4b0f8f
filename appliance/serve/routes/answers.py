"""Answers: native POST /v1/ask (JSON or Server-Sent Events), OpenAI-compatible POST /v1/chat/completions, and
the engines behind them (GET /v1/models, GET /v1/engines)."""
from __future__ import annotations

import time

from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import Route

from ..api.requests import AskBody, ChatBody
from ..edge import edge, read_body, require_ready, tenant_of
from ..http.responses import (ChatMeta, answer_json, auto_model_json, chat_completion_json, engine_json,
                         model_json)
from ..http.streams import SSE_HEADERS, collect, native_sse, openai_sse, primed, traced


async def ask(request: Request) -> Response:
    answers = require_ready(request).answers
    body = await read_body(request, AskBody)
    req = body.ask(request.state.request_id)
    events = await primed(traced(answers.ask(req), request.state.record))
    if body.stream:
        return StreamingResponse(native_sse(events), media_type="text/event-stream", headers=SSE_HEADERS)
    return JSONResponse(answer_json(await collect(events), req.request_id))


async def chat_completions(request: Request) -> Response:
    answers = require_ready(request).answers
    # OpenAI clients cannot easily add body fields: the tenant may come in a header (checked like a body field,
    # and before the body is read, as a tenant named in the body would be)
    header = request.headers.get("x-tenant")
    header_tenant = tenant_of(request, header, "X-Tenant") if header is not None else None
    body = await read_body(request, ChatBody)
    tenant = body.tenant or header_tenant or tenant_of(request, "default")
    req = body.ask(tenant, request.state.request_id, edge(request).settings.server)
    events = await primed(traced(answers.ask(req), request.state.record))
    chat = ChatMeta(f"chatcmpl-{req.request_id}", int(time.time()), body.model)
    if body.stream:
        return StreamingResponse(openai_sse(events, chat), media_type="text/event-stream", headers=SSE_HEADERS)
    return JSONResponse(chat_completion_json(await collect(events), chat))


async def models(request: Request) -> JSONResponse:
    """Every engine the settings configure, whether or not generation runs (then its state is "disabled")."""
    status = require_ready(request).engines.status()
    roles = edge(request).settings.engine_roles()
    return JSONResponse({"object": "list",
                         "data": [auto_model_json(), *(model_json(role, status.get(role)) for role in roles)]})


async def engines(request: Request) -> JSONResponse:
    status = require_ready(request).engines.status()
    admin = request.state.tenant is None  # an admin key's, or any client's on a box without keys
    return JSONResponse({"engines": {role: engine_json(s, admin) for role, s in status.items()}})


routes = [
    Route("/v1/ask", ask, methods=["POST"], name="ask"),
    Route("/v1/chat/completions", chat_completions, methods=["POST"], name="chat"),
    Route("/v1/models", models, methods=["GET"], name="models"),
    Route("/v1/engines", engines, methods=["GET"], name="engines"),
]
