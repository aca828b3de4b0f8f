"""POST /v1/documents (store and index), GET /v1/documents (a partition's documents, a page at a time) and
DELETE /v1/documents/{id}."""
from __future__ import annotations

import asyncio

from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Route

from ...library import KindConflict, LanguageConflict, QuotaExceeded
from ..api.requests import DOCUMENT_ID, IngestBody
from ..api.validation import validate
from ..edge import copies_json, edge, name_param, read_body, require_ready, tenant_param
from ..http.errors import ApiError
from ..http.responses import document_json, ingest_json


async def post_documents(request: Request) -> JSONResponse:
    library = require_ready(request).library
    body = await read_body(request, IngestBody)
    try:
        result = await library.ingest(body.tenant, body.partition, body.inputs(), body.kind, body.wait,
                                      edge(request).settings.server.ingest_wait_timeout_s, language=body.language)
    except KindConflict as exc:
        raise ApiError.conflict("kind_conflict", str(exc), "kind") from None
    except LanguageConflict as exc:
        raise ApiError.conflict("language_conflict", str(exc), "language") from None
    except QuotaExceeded as exc:
        raise ApiError.quota_exceeded(str(exc), exc.field) from None
    # 202: stored (durable) but not searchable yet: the client said not to wait, the build took longer than
    # server.ingest_wait_timeout_s, or it failed (index_error)
    reply = ingest_json(result) | await copies_json(request, body.tenant, result.seq)
    return JSONResponse(reply, status_code=200 if result.indexed else 202)


async def delete_document(request: Request) -> JSONResponse:
    library = require_ready(request).library
    key = validate(request.path_params["id"], DOCUMENT_ID, "id")
    tenant = tenant_param(request)
    results = await library.delete(tenant, key, name_param(request, "partition"),
                                   wait_timeout_s=edge(request).settings.server.ingest_wait_timeout_s)
    done = [r for r in results if any(d.status == "deleted" for d in r.documents)]
    if not done:
        raise ApiError.not_found(f"no document {key!r} for tenant {tenant!r}", "id")
    deleted = [{"partition": r.partition, "version": r.version, "indexed": r.indexed,
                **({"index_error": r.index_error} if r.index_error else {})} for r in done]
    body: dict = {"id": key, "deleted": deleted} | await copies_json(request, tenant, max(r.seq for r in done))
    errors = [r.index_error for r in done if r.index_error]
    if errors:
        body["index_error"] = errors[0]
    # 202 as for POST: deleted in the store (durable), but still found by searches until the index catches up
    return JSONResponse(body, status_code=200 if all(r.indexed for r in done) else 202)


async def list_documents(request: Request) -> JSONResponse:
    """A partition's documents in id order, a page at a time: `after` = the last id of the previous page."""
    library = require_ready(request).library
    tenant = tenant_param(request)
    partition = name_param(request, "partition")
    if partition is None:
        raise ApiError.invalid("is required", "partition")
    after = request.query_params.get("after")
    if after is not None:
        validate(after, DOCUMENT_ID, "after")
    limit = request.query_params.get("limit", "100")
    if not limit.isdigit() or not 1 <= int(limit) <= 1000:
        raise ApiError.invalid("must be a whole number from 1 to 1000", "limit")
    docs = await asyncio.to_thread(library.list_documents, tenant, partition, after or "", int(limit))
    if docs is None:
        raise ApiError.not_found(f"no partition {partition!r} for tenant {tenant!r}", "partition")
    return JSONResponse({"documents": [document_json(d) for d in docs],
                         "next": docs[-1].key if len(docs) == int(limit) else None})


async def documents(request: Request) -> JSONResponse:
    # one route per path, so that a 405 lists every method the path has (Allow)
    return await (post_documents(request) if request.method == "POST" else list_documents(request))


routes = [
    Route("/v1/documents", documents, methods=["GET", "POST"], name="documents"),
    # {id:path}: a client's document id may contain "/"
    Route("/v1/documents/{id:path}", delete_document, methods=["DELETE"], name="documents"),
]
