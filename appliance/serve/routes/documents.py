"""POST /v1/documents (store and index) and DELETE /v1/documents/{id}."""
from __future__ import annotations

from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Route

from ...library import KindConflict
from ..edge import edge, name_param, read_body, require_ready, tenant_param
from ..errors import ApiError
from ..requests import IngestBody
from ..responses import ingest_json
from ..schemas import DOCUMENT_ID
from ..validation import validate


async def post_documents(request: Request) -> JSONResponse:
    library = require_ready(request).library
    body = IngestBody.parse(await read_body(request, edge(request).bodies.ingest))
    try:
        result = await library.ingest(body.tenant, body.partition, body.documents, body.kind, body.wait)
    except KindConflict as exc:
        raise ApiError.conflict("kind_conflict", str(exc), "kind") from None
    # 202: stored (durable) but not searchable yet, because the client said not to wait or the build failed
    return JSONResponse(ingest_json(result), status_code=200 if result.indexed else 202)


async def delete_document(request: Request) -> JSONResponse:
    library = require_ready(request).library
    key = validate(request.path_params["id"], DOCUMENT_ID, "id")
    tenant = tenant_param(request)
    results = await library.delete(tenant, key, name_param(request, "partition"))
    deleted = [{"partition": r.partition, "version": r.version} for r in results
               if any(d.status == "deleted" for d in r.documents)]
    if not deleted:
        raise ApiError.not_found(f"no document {key!r} for tenant {tenant!r}", "id")
    return JSONResponse({"id": key, "deleted": deleted})


routes = [
    Route("/v1/documents", post_documents, methods=["POST"], name="documents"),
    # {id:path}: a client's document id may contain "/"
    Route("/v1/documents/{id:path}", delete_document, methods=["DELETE"], name="documents"),
]
