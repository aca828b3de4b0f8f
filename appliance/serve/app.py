"""The Starlette application: routes, error mapping, and the appliance's lifecycle.

The appliance starts in the background so /healthz answers at once while /readyz (and every API route) says
503 until warm-up is done; a load balancer or systemd probe can tell "starting" from "dead".
"""
from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from pathlib import Path

from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.middleware import Middleware
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from ..config import Settings
from ..encode import EncoderBusy
from ..ingest import DocumentInput
from ..pipeline import Appliance, KindConflict
from ..retrieve import PartitionFilter
from .admission import Admission, ApiKeys, Gate, TokenBuckets
from .answers import answer_routes
from .metrics import Metrics
from .schemas import ingest_body, openapi, search_body
from .telemetry import Telemetry
from .validation import NAME_PATTERN, BadRequest, Spec, http_error, int_param, parse_json, validate

log = logging.getLogger("appliance.serve")


def create_app(settings: Settings, appliance: Appliance | None = None) -> Starlette:
    appliance = appliance or Appliance(settings)
    ingest_spec, search_spec = ingest_body(settings), search_body(settings)
    name_spec = Spec("string", pattern=NAME_PATTERN, required=True)
    limit_spec, entry_spec = Spec("integer", default=100, min=1, max=1000), Spec("integer", required=True, min=0)
    api_doc = openapi(settings)
    state: dict = {"boot_error": None}
    metrics = Metrics()
    telemetry = Telemetry(settings.telemetry, metrics)
    a = settings.admission
    keys = ApiKeys.load(Path(a.keys_file)) if a.keys_file else None
    if keys is None:
        log.warning("no API keys file (admission.keys_file): requests name their tenant themselves")
    gate = Gate(keys, TokenBuckets(a.rate_per_s, a.burst), a.max_in_flight, metrics.rejected, telemetry.finish)
    metrics.set_gauge_source("appliance_in_flight_requests", "requests in progress", lambda: gate.in_flight)
    metrics.attach_engines(appliance.engines)

    def tenant_of(request: Request, given: str | None, field: str = "tenant") -> str:
        """The API key's tenant; a request may repeat it but never name another. Without keys, the given one."""
        key_tenant = request.state.tenant
        if given is not None:
            validate(given, name_spec, field)
        if key_tenant is None:
            if given is None:
                raise BadRequest("is required", field)
            tenant = given
        elif given is not None and given != key_tenant:
            raise BadRequest(f"this API key belongs to tenant {key_tenant!r}", field, status=403, code="forbidden")
        else:
            tenant = key_tenant
        request.state.record.tenant = tenant
        return tenant

    async def read_body(request: Request, spec: Spec) -> dict:
        """The JSON body validated against `spec`, its tenant filled in from the API key when it names none."""
        body = await read_json(request)
        if isinstance(body, dict) and request.state.tenant is not None and body.get("tenant") is None:
            body["tenant"] = request.state.tenant
        body = validate(body, spec)
        if body.get("tenant") is not None:
            body["tenant"] = tenant_of(request, body["tenant"])
        return body

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
        body = await read_body(request, ingest_spec)
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
        tenant = tenant_of(request, request.query_params.get("tenant"))
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
        body = await read_body(request, search_spec)
        filters = body["filters"] or {}
        where = PartitionFilter(
            tenant=body["tenant"], names=tuple(body["partitions"]) if body["partitions"] else None,
            kinds=tuple(filters["kinds"]) if filters.get("kinds") else None,
            time_from=filters.get("time_from"), time_to=filters.get("time_to"),
        )
        result = await appliance.search(body["query"], where, body["k"], body["late_interaction"])
        request.state.record.timings.update(result.timings)
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
        tenant = tenant_of(request, request.query_params.get("tenant"))
        return JSONResponse({"partitions": appliance.partitions(tenant)})

    async def cache_entries(request: Request) -> JSONResponse:
        require_ready()
        tenant = tenant_of(request, request.query_params.get("tenant"))
        limit = int_param(request.query_params.get("limit"), limit_spec, "limit")
        entries = await asyncio.to_thread(appliance.cache_entries, tenant, limit)  # disk reads
        return JSONResponse({"tenant": tenant, "entries": entries})

    async def delete_cache_entry(request: Request) -> JSONResponse:
        require_ready()
        tenant = tenant_of(request, request.query_params.get("tenant"))
        entry_id = int_param(request.path_params["id"], entry_spec, "id")
        if not await asyncio.to_thread(appliance.delete_cache_entry, tenant, entry_id):
            raise BadRequest(f"no cache entry {entry_id} for tenant {tenant!r}", "id", status=404, code="not_found")
        return JSONResponse({"id": entry_id, "deleted": True})

    async def metrics_text(request: Request) -> Response:
        body, content_type = metrics.render()
        return Response(body, media_type=content_type)

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
        if exc.status in (400, 413, 422):
            metrics.rejected("too_large" if exc.status == 413 else "invalid", _endpoint_of(request))
        headers = {"Retry-After": "1"} if exc.status == 503 else None
        return JSONResponse(exc.body(), status_code=exc.status, headers=headers)

    async def busy(request: Request, exc: EncoderBusy) -> JSONResponse:
        metrics.rejected("overloaded", _endpoint_of(request))
        return JSONResponse({"error": {"code": "overloaded", "message": str(exc)}}, status_code=503,
                            headers={"Retry-After": "1"})

    @contextlib.asynccontextmanager
    async def lifespan(app: Starlette):
        async def boot() -> None:
            started = time.perf_counter()
            try:
                await appliance.start()
                appliance.on_engine_sample(metrics.engine_sample)
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
            telemetry.shutdown()

    routes = [
        Route("/v1/documents", post_documents, methods=["POST"]),
        Route("/v1/documents/{id:path}", delete_document, methods=["DELETE"]),
        Route("/v1/search", search, methods=["POST"]),
        Route("/v1/partitions", partitions, methods=["GET"]),
        Route("/healthz", healthz, methods=["GET"]),
        Route("/readyz", readyz, methods=["GET"]),
        Route("/openapi.json", openapi_json, methods=["GET"]),
        Route("/metrics", metrics_text, methods=["GET"]),
        Route("/v1/cache/entries", cache_entries, methods=["GET"]),
        Route("/v1/cache/entries/{id}", delete_cache_entry, methods=["DELETE"]),
        *answer_routes(settings, appliance, read_body, tenant_of, require_ready),
    ]
    app = Starlette(routes=routes, lifespan=lifespan, middleware=[Middleware(Admission, gate=gate)],
                    exception_handlers={BadRequest: bad_request, EncoderBusy: busy, HTTPException: http_error})
    app.state.appliance = appliance
    return app


def _endpoint_of(request: Request) -> str:
    record = request.scope.get("state", {}).get("record")  # set by the admission middleware on /v1/ paths
    return record.endpoint if record is not None else "other"
