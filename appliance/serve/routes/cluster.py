"""The routes the site's boxes use between themselves (never through the balancer, which refuses /cluster/):
a box's journal after an entry, a file it holds, "pull from me now", and the status `appliance cluster status`
reads. Each needs the site's shared secret; outside /v1/, so no API key, slot or rate limit applies."""
from __future__ import annotations

import asyncio
import os

from starlette.requests import Request
from starlette.responses import FileResponse, JSONResponse, Response
from starlette.routing import Route

from ...cluster import STORE_ID, Replicator
from ..api.declare import build, spec_of
from ..api.requests import SyncBody
from ..api.validation import parse_json, validate
from ..edge import require_ready
from ..http.errors import ApiError

MAX_SYNC_BODY = 1024
SYNC_SPEC = spec_of(SyncBody)


def _replicator(request: Request) -> Replicator:
    cluster = require_ready(request).cluster
    if cluster is None:
        raise ApiError.not_found("this box is not part of a site (cluster.boxes is not set)")
    if not cluster.authorized(request.headers.get("authorization", "")):
        raise ApiError.unauthorized("the site's boxes send the cluster secret: Authorization: Bearer <secret>")
    return cluster


def _peer(cluster: Replicator, name: str | None) -> str:
    if name not in cluster.peers:
        raise ApiError.invalid(f"{name!r} is not another box of this site", "box")
    return name


def _store(value) -> str:
    if not isinstance(value, str) or not STORE_ID.fullmatch(value):
        raise ApiError.invalid("must be the asking box's store id (32 hex digits)", "store")
    return value


async def journal(request: Request) -> JSONResponse:
    cluster = _replicator(request)
    peer = _peer(cluster, request.query_params.get("box"))
    after = request.query_params.get("after", "0")
    if not after.isdigit() or len(after) > 18:
        raise ApiError.invalid("must be a journal entry number (0 or more)", "after")
    store = _store(request.query_params.get("store"))
    page = await asyncio.to_thread(cluster.feed, peer, store, int(after))
    return Response(page, media_type="application/json")


async def file(request: Request) -> Response:
    cluster = _replicator(request)
    sha256 = request.path_params["sha256"]
    try:
        path = cluster.library.blobs.path(sha256)
        info = await asyncio.to_thread(os.stat, path)
    except (ValueError, FileNotFoundError):
        raise ApiError.not_found(f"no file {sha256[:64]!r} here", "sha256") from None
    # streamed: a peer catching up on many large files does not make this box hold them in memory
    return FileResponse(path, media_type="application/octet-stream", stat_result=info)


async def sync(request: Request) -> JSONResponse:
    """A peer wrote up to its entry `seq` for a tenant both hold: pull it now, answer once applied."""
    cluster = _replicator(request)
    raw = b""
    async for chunk in request.stream():  # a small body: read no further than its limit
        raw += chunk
        if len(raw) > MAX_SYNC_BODY:
            raise ApiError.too_large(MAX_SYNC_BODY)
    body = build(SyncBody, validate(parse_json(raw, max_values=16), SYNC_SPEC))
    peer = _peer(cluster, body.box)
    return JSONResponse({"applied": await cluster.wait_applied(peer, body.store, body.seq)})


async def status(request: Request) -> JSONResponse:
    cluster = _replicator(request)
    return JSONResponse(await asyncio.to_thread(cluster.status))


routes = [
    Route("/cluster/journal", journal, methods=["GET"], name="cluster"),
    Route("/cluster/files/{sha256}", file, methods=["GET"], name="cluster"),
    Route("/cluster/sync", sync, methods=["POST"], name="cluster"),
    Route("/cluster/status", status, methods=["GET"], name="cluster"),
]
