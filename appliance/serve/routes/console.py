"""The console: a page served by the appliance itself (GET / and its assets under /console/), and what the page
asks first (GET /v1/whoami) and polls for its Overview (GET /v1/admin/overview).

The assets are package data, read once at import: the page works on an air-gapped box, with no CDN, web font or
build step. Its Content-Security-Policy lets it talk to this origin only, so no asset or request of the page can
go anywhere else, and a stored document's text shown in it can never run as script.
"""
from __future__ import annotations

import asyncio
import hashlib
import re
from pathlib import Path

from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from ..edge import Phase, edge
from ..http.errors import ApiError
from ..observe.overview import overview_json

ASSETS = Path(__file__).resolve().parent.parent / "console"
_MEDIA = {".html": "text/html; charset=utf-8", ".js": "text/javascript; charset=utf-8",
          ".css": "text/css; charset=utf-8", ".svg": "image/svg+xml"}
_ASSET_NAME = re.compile(r"[a-z0-9][a-z0-9_-]*\.(?:js|css|svg)")
CSP = ("default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data: blob:; connect-src 'self'; "
       "font-src 'self'; frame-ancestors 'none'; base-uri 'none'; form-action 'none'")


def _load_assets() -> dict[str, tuple[bytes, str]]:
    """name -> (bytes, ETag) for every file shipped with the console."""
    files = {f.name: f.read_bytes() for f in sorted(ASSETS.iterdir()) if f.is_file() and f.suffix in _MEDIA}
    return {name: (data, '"' + hashlib.sha256(data).hexdigest()[:16] + '"') for name, data in files.items()}


_ASSETS = _load_assets()


def _asset(request: Request, name: str, cache: str) -> Response:
    data, etag = _ASSETS[name]
    headers = {"Content-Security-Policy": CSP, "X-Content-Type-Options": "nosniff", "ETag": etag,
               "Cache-Control": cache, "Referrer-Policy": "no-referrer", "X-Frame-Options": "DENY"}
    if request.headers.get("if-none-match") == etag:
        return Response(status_code=304, headers=headers)
    return Response(data, media_type=_MEDIA[Path(name).suffix], headers=headers)


async def index(request: Request) -> Response:
    return _asset(request, "index.html", "no-cache")  # revalidated each load: a new version shows at once


async def asset(request: Request) -> Response:
    name = request.path_params["name"]
    if not _ASSET_NAME.fullmatch(name) or name not in _ASSETS:
        raise ApiError.not_found(f"no console file {name[:100]!r}", "name")
    return _asset(request, name, "no-cache")


async def whoami(request: Request) -> JSONResponse:
    """What the page may show: the key's tenant, or every tenant (an admin key, or a box without keys)."""
    keys = edge(request).gate.keys
    tenant = request.state.tenant
    role = "tenant" if tenant is not None else ("admin" if request.state.admin else "open")
    body = {"keys": keys is not None, "role": role, "tenant": tenant, "admin": role != "tenant", "tenants": []}
    if role == "tenant":
        body["tenants"] = [tenant]
    elif request.app.state.boot.phase is Phase.READY:
        body["tenants"] = request.app.state.services.library.tenants()
    return JSONResponse(body)


async def overview(request: Request) -> JSONResponse:
    """The whole box: an admin key's (or any client's on a box without keys)."""
    if request.state.tenant is not None:
        raise ApiError.forbidden("the overview shows every tenant's traffic: it needs an admin key", "Authorization")
    e = edge(request)
    services = request.app.state.services if request.app.state.boot.phase is Phase.READY else None
    counts = await asyncio.to_thread(services.cache_admin.counts) if services is not None else None
    others = max(0, e.gate.in_flight - 1)  # this request is in flight too
    return JSONResponse(overview_json(request.app.state.boot, e.metrics, others, services, counts))


routes = [
    Route("/", index, methods=["GET"], name="console"),
    Route("/console/{name}", asset, methods=["GET"], name="console"),
    Route("/v1/whoami", whoami, methods=["GET"], name="whoami"),
    Route("/v1/admin/overview", overview, methods=["GET"], name="overview"),
]
