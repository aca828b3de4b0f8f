"""Operating the server: health and readiness probes, metrics, this API's document, and the semantic cache's
entries (list a tenant's, drop a wrong one)."""
from __future__ import annotations

import asyncio

from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from ..api.validation import Spec, int_param
from ..edge import BootState, Phase, edge, require_ready, tenant_param
from ..http.errors import ApiError

LIMIT = Spec("integer", default=100, min=1, max=1000)  # as the OpenAPI document's `limit`
ENTRY_ID = Spec("integer", required=True, min=0)


async def healthz(request: Request) -> JSONResponse:
    return JSONResponse({"status": "ok"})


async def readyz(request: Request) -> JSONResponse:
    """200 once warm-up is done; 503 while starting or stopping, or after a failed boot, so a probe can tell
    "starting" from "dead" while the port is already open. Why a boot failed (paths, settings) is for an admin
    key's request and the log: the probe is open to anyone."""
    boot: BootState = request.app.state.boot
    if request.app.state.draining:  # the balancer moves new requests away; those in progress finish
        return JSONResponse({"status": "draining"}, status_code=503)
    if boot.phase is Phase.READY:
        report = request.app.state.services.boot
        graphs = {name: {"query": g.query, "passage": g.passage, "query_ms": g.query_ms, "passage_ms": g.passage_ms}
                  for name, g in report.encoder_graphs.items()}
        return JSONResponse({"status": "ready", "boot_ms": report.boot_ms, "warm_up_ms": report.warm_up_ms,
                             "encoder_graphs": graphs})
    body = {"status": boot.phase.value}
    if boot.error and _admin(request):
        body["error"] = boot.error
    return JSONResponse(body, status_code=503)


def _admin(request: Request) -> bool:
    """An admin key in Authorization (outside /v1/, no admission has looked at it)."""
    keys = edge(request).gate.keys
    caller = keys.caller_for_header(request.headers.get("authorization", "")) if keys is not None else None
    return caller is not None and caller.admin


async def metrics(request: Request) -> Response:
    """With API keys on, any tenant's key: the numbers say who is busy and which models run; the prefix cache's
    figures only with an admin key (they tell whether another tenant's prompt was seen)."""
    keys = edge(request).gate.keys
    caller = keys.caller_for_header(request.headers.get("authorization", "")) if keys is not None else None
    if keys is not None and caller is None:
        raise ApiError.unauthorized("/metrics needs an API key: send Authorization: Bearer <key>")
    body, content_type = edge(request).metrics.render(admin=caller is None or caller.admin)
    return Response(body, media_type=content_type)


async def openapi_json(request: Request) -> JSONResponse:
    return JSONResponse(edge(request).openapi)


async def cache_entries(request: Request) -> JSONResponse:
    admin = require_ready(request).cache_admin
    tenant = tenant_param(request)
    limit = int_param(request.query_params.get("limit"), LIMIT, "limit")
    entries = await asyncio.to_thread(admin.entries, tenant, limit)  # disk reads
    return JSONResponse({"tenant": tenant, "entries": entries})


async def delete_cache_entry(request: Request) -> JSONResponse:
    admin = require_ready(request).cache_admin
    tenant = tenant_param(request)
    entry_id = int_param(request.path_params["id"], ENTRY_ID, "id")
    if not await asyncio.to_thread(admin.delete, tenant, entry_id):
        raise ApiError.not_found(f"no cache entry {entry_id} for tenant {tenant!r}", "id")
    return JSONResponse({"id": entry_id, "deleted": True})


routes = [
    Route("/healthz", healthz, methods=["GET"], name="healthz"),
    Route("/readyz", readyz, methods=["GET"], name="readyz"),
    Route("/metrics", metrics, methods=["GET"], name="metrics"),
    Route("/openapi.json", openapi_json, methods=["GET"], name="openapi"),
    Route("/v1/cache/entries", cache_entries, methods=["GET"], name="cache"),
    Route("/v1/cache/entries/{id}", delete_cache_entry, methods=["DELETE"], name="cache"),
]
