"""GET /v1/partitions; one partition: GET it, PATCH its settings (its own dense weight); its re-index: POST queues one
(run in the background), GET says where it stands."""
from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING

from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Route

from ...library import ReindexerClosed, ReindexPending, ReindexQueueFull
from ..api.requests import PartitionSettingsBody, ReindexBody
from ..api.validation import validate
from ..edge import NAME, edge, read_body, require_ready, tenant_param
from ..http.errors import ApiError
from ..http.responses import partition_json, reindex_json

if TYPE_CHECKING:
    from ...wiring import Services


async def partitions(request: Request) -> JSONResponse:
    library = require_ready(request).library
    details = await asyncio.to_thread(library.partition_details, tenant_param(request))  # store and disk reads
    return JSONResponse({"partitions": [partition_json(p) for p in details]})


async def partition_state(request: Request) -> JSONResponse:
    library = require_ready(request).library
    name = validate(request.path_params["name"], NAME, "name")
    tenant = tenant_param(request)
    found = next(iter(await asyncio.to_thread(library.partition_details, tenant, name)), None)  # store and disk reads
    if found is None:
        raise ApiError.not_found(f"no partition {name!r} for tenant {tenant!r}", "name")
    return JSONResponse(partition_json(found))


async def update_partition(request: Request) -> JSONResponse:
    services = require_ready(request)
    name = validate(request.path_params["name"], NAME, "name")
    body = await read_body(request, PartitionSettingsBody)
    _one_box_only(services, "site_setting", "set it on each box in turn with its server stopped (`appliance "
                  "partition --dense-weight`)")
    try:
        info = await services.library.set_dense_weight(body.tenant, name, body.weight)
    except LookupError as exc:
        raise ApiError.not_found(str(exc), "name") from None
    return JSONResponse(partition_json(info))


async def one_partition(request: Request) -> JSONResponse:
    # one route per path, so that a 405 lists every method the path has (Allow)
    return await (update_partition(request) if request.method == "PATCH" else partition_state(request))


async def start_reindex(request: Request) -> JSONResponse:
    services = require_ready(request)
    name = validate(request.path_params["name"], NAME, "name")
    body = await read_body(request, ReindexBody)
    _one_box_only(services, "site_reindex", "re-index each box in turn with its server stopped (`appliance "
                  "reindex`): the balancer sends its tenants to the other box meanwhile")
    reindexer = services.reindexer
    try:
        job = reindexer.start(body.tenant, name, body.language, body.tokens)
    except LookupError as exc:
        raise ApiError.not_found(str(exc), "name") from None
    except ReindexPending as exc:  # the tenant's own partition: its state may be named
        raise ApiError.conflict("reindex_pending", f"{exc}: ask GET {request.url.path} how it stands",
                                headers={"Location": request.url.path}) from None
    except ReindexQueueFull as exc:
        raise ApiError.too_many("reindex_queue_full", f"{exc}: try again once one has ended") from None
    except ReindexerClosed as exc:
        raise ApiError.unavailable("stopping", str(exc)) from None
    return JSONResponse(reindex_json(job, reindexer.ahead(job)), status_code=202,
                        headers={"Location": request.url.path})


async def reindex_state(request: Request) -> JSONResponse:
    services = require_ready(request)
    name = validate(request.path_params["name"], NAME, "name")
    tenant = tenant_param(request)
    job = services.reindexer.job(tenant, name)
    if job is None:
        raise ApiError.not_found(f"no re-index of partition {name!r} of tenant {tenant!r} since the server "
                                 "started", "name")
    return JSONResponse(reindex_json(job, services.reindexer.ahead(job)))


async def reindex(request: Request) -> JSONResponse:
    # one route per path, so that a 405 lists every method the path has (Allow)
    return await (start_reindex(request) if request.method == "POST" else reindex_state(request))


def _one_box_only(services: Services, code: str, instead: str) -> None:
    """Each box of a site keeps its own store and indexes: a change made over HTTP reaches the one box the balancer
    picked, and the tenant's copies would then search differently (another language, another weight)."""
    if services.cluster is not None:
        raise ApiError.conflict(code, f"on a site of several boxes, {instead}")


routes = [
    Route("/v1/partitions", partitions, methods=["GET"], name="partitions"),
    Route("/v1/partitions/{name}", one_partition, methods=["GET", "PATCH"], name="partitions"),
    Route("/v1/partitions/{name}/reindex", reindex, methods=["GET", "POST"], name="partitions"),
]
