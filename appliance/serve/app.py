"""The Starlette application: routes, error mapping, and the appliance's lifecycle.

The appliance starts in the background so /healthz answers at once while /readyz (and every API route) says
503 until warm-up is done; a load balancer or systemd probe can tell "starting" from "dead".
"""
from __future__ import annotations

import asyncio
import contextlib
import logging
import time

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Route

from ..config import Settings
from ..encode import EncoderBusy
from ..ingest import DocumentInput
from ..pipeline import Appliance, KindConflict
from ..retrieve import PartitionFilter
from .answers import answer_routes
from .schemas import ingest_body, openapi, search_body
from .validation import NAME_PATTERN, BadRequest, Spec, parse_json, validate

log = logging.getLogger("appliance.serve")


def create_app(settings: Settings, appliance: Appliance | None = None) -> Starlette:
    appliance = appliance or Appliance(settings)
    ingest_spec, search_spec = ingest_body(settings), search_body(settings)
    name_spec = Spec("string", pattern=NAME_PATTERN, required=True)
    api_doc = openapi(settings)
    state: dict = {"boot_error": None}

    async def read_json(request: Request) -> dict:
        limit = settings.server.max_body_bytes
        declared = request.headers.get("content-length")
        if declared is not None and declared.isdigit() and int(declared) > limit:
            raise BadRequest(f"body is larger than {limit} bytes", status=413, code="body_too_large")
        chunks, size = [], 0
        async for chunk in request.stream():
            size += len(chunk)
            if size > limit:
                raise BadRequest(f"body is larger than {limit} bytes", status=413, code="body_too_large")
            chunks.append(chunk)
        if not size:
            raise BadRequest("body is empty; a JSON object is expected", status=400, code="invalid_json")
        return parse_json(b"".join(chunks))

    def require_ready() -> None:
        if not appliance.ready:
            message = f"boot failed: {state['boot_error']}" if state["boot_error"] else "warming up"
            raise BadRequest(message, status=503, code="not_ready")

    async def post_documents(request: Request) -> JSONResponse:
        require_ready()
        body = validate(await read_json(request), ingest_spec)
        docs = [DocumentInput(text=d["text"], title=d["title"], id=d["id"], source=d["source"],
                              metadata=d["metadata"], time=d["time"]) for d in body["documents"]]
        ids = [d.id for d in docs if d.id is not None]
        if len(ids) != len(set(ids)):
            raise BadRequest("document ids must be unique within a request", "documents")
        try:
            result = await appliance.ingest(body["tenant"], body["partition"], docs, body["kind"], body["wait"])
        except KindConflict as exc:
            raise BadRequest(str(exc), "kind", status=409, code="kind_conflict") from None
        indexed = result.indexed_version >= result.version
        reply = {
            "tenant": result.tenant, "partition": result.partition, "version": result.version,
            "indexed_version": result.indexed_version, "indexed": indexed,
            "documents": [{"id": d.key, "status": d.status, "chunks": d.chunks} for d in result.documents],
        }
        if result.index_error:
            reply["index_error"] = result.index_error
        return JSONResponse(reply, status_code=200 if indexed else 202)

    async def delete_document(request: Request) -> JSONResponse:
        require_ready()
        key = request.path_params["id"]
        if not 0 < len(key) <= 256:
            raise BadRequest("must have 1 to 256 characters", "id")
        tenant = validate(request.query_params.get("tenant"), name_spec, "tenant")
        partition = request.query_params.get("partition")
        if partition is not None:
            validate(partition, name_spec, "partition")
        results = await appliance.delete(tenant, key, partition)
        deleted = [{"partition": r.partition, "version": r.version} for r in results
                   if any(d.status == "deleted" for d in r.documents)]
        if not deleted:
            raise BadRequest(f"no document {key!r} for tenant {tenant!r}", "id", status=404, code="not_found")
        return JSONResponse({"id": key, "deleted": deleted})

    async def search(request: Request) -> JSONResponse:
        require_ready()
        body = validate(await read_json(request), search_spec)
        filters = body["filters"] or {}
        where = PartitionFilter(
            tenant=body["tenant"], names=tuple(body["partitions"]) if body["partitions"] else None,
            kinds=tuple(filters["kinds"]) if filters.get("kinds") else None,
            time_from=filters.get("time_from"), time_to=filters.get("time_to"),
        )
        result = await appliance.search(body["query"], where, body["k"], body["late_interaction"])
        return JSONResponse({
            "results": [{
                "document_id": h.chunk.doc_key, "chunk_id": h.chunk.chunk_id, "chunk": h.chunk.ordinal,
                "partition": h.partition, "title": h.chunk.title, "text": h.chunk.text, "source": h.chunk.source,
                "metadata": h.chunk.metadata, "score": h.score, "rrf_score": h.rrf, "bm25_rank": h.bm25_rank,
                "ann_rank": h.ann_rank, "late_score": h.late,
            } for h in result.hits],
            "partitions": result.partitions,
            "timings_ms": result.timings,
        })

    async def partitions(request: Request) -> JSONResponse:
        require_ready()
        tenant = validate(request.query_params.get("tenant"), name_spec, "tenant")
        return JSONResponse({"partitions": appliance.partitions(tenant)})

    async def healthz(request: Request) -> JSONResponse:
        return JSONResponse({"status": "ok"})

    async def readyz(request: Request) -> JSONResponse:
        if appliance.ready:
            return JSONResponse({"status": "ready", "boot_ms": appliance.boot_ms, "warm_up_ms": appliance.warm_up_ms})
        body = {"status": "failed" if state["boot_error"] else "starting"}
        if state["boot_error"]:
            body["error"] = state["boot_error"]
        return JSONResponse(body, status_code=503)

    async def openapi_json(request: Request) -> JSONResponse:
        return JSONResponse(api_doc)

    async def bad_request(request: Request, exc: BadRequest) -> JSONResponse:
        headers = {"Retry-After": "1"} if exc.status == 503 else None
        return JSONResponse(exc.body(), status_code=exc.status, headers=headers)

    async def busy(request: Request, exc: EncoderBusy) -> JSONResponse:
        return JSONResponse({"error": {"code": "overloaded", "message": str(exc)}}, status_code=503,
                            headers={"Retry-After": "1"})

    @contextlib.asynccontextmanager
    async def lifespan(app: Starlette):
        async def boot() -> None:
            started = time.perf_counter()
            try:
                await appliance.start()
            except Exception as exc:  # keep serving /readyz so the failure is visible, not a dead port
                state["boot_error"] = f"{type(exc).__name__}: {exc}"
                log.exception("boot failed")
                return
            log.info("serving on %s:%d (boot %.1f s)", settings.server.host, settings.server.port,
                     time.perf_counter() - started)

        task = asyncio.create_task(boot())
        try:
            yield
        finally:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
            await appliance.stop()

    routes = [
        Route("/v1/documents", post_documents, methods=["POST"]),
        Route("/v1/documents/{id:path}", delete_document, methods=["DELETE"]),
        Route("/v1/search", search, methods=["POST"]),
        Route("/v1/partitions", partitions, methods=["GET"]),
        Route("/healthz", healthz, methods=["GET"]),
        Route("/readyz", readyz, methods=["GET"]),
        Route("/openapi.json", openapi_json, methods=["GET"]),
        *answer_routes(settings, appliance, read_json, require_ready),
    ]
    app = Starlette(routes=routes, lifespan=lifespan,
                    exception_handlers={BadRequest: bad_request, EncoderBusy: busy})
    app.state.appliance = appliance
    return app
