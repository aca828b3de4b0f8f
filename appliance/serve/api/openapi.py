"""The OpenAPI document of the HTTP API, built from the request bodies (requests.py) and the operations below."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from ...config import Settings
from .declare import spec_of
from .requests import (DOCUMENT_ID, ID_PATTERN, LANGUAGE_CHOICES, LANGUAGE_HELP, AskBody, ChatBody, IngestBody,
                       PartitionSettingsBody, ReindexBody, SearchBody, SyncBody)
from .validation import NAME_PATTERN, Spec


ERROR_SCHEMA = {"type": "object", "required": ["error"], "properties": {"error": {
    "type": "object", "required": ["code", "message"], "properties": {
        "code": {"type": "string", "description": "Stable machine-readable reason, e.g. invalid_json."},
        "message": {"type": "string", "description": "What is wrong, for a person."},
        "field": {"type": "string", "description": "JSON path of the wrong field, e.g. documents[3].text."}}}}}

# Shared error responses: status -> (component name, description, headers it always carries).
_RETRY_AFTER = {"description": "Seconds to wait before trying again.", "required": True,
                "schema": {"type": "integer", "minimum": 0}}
ERRORS: dict[int, tuple[str, str, dict]] = {
    400: ("BadBody", "Malformed body: not UTF-8, not JSON (NaN, Infinity and unpaired surrogates included), "
                     "nested too deeply, or empty", {}),
    401: ("Unauthorized", "Missing or invalid API key (only where API keys are configured)",
          {"WWW-Authenticate": {"description": "Bearer", "required": True, "schema": {"type": "string"}}}),
    403: ("Forbidden", "The request names a tenant other than its API key's, or its Host or Origin is not one "
                       "this server answers (loopback, server.host, server.allowed_hosts)", {}),
    404: ("NotFound", "No such item", {}),
    409: ("Conflict", "Conflicts with stored state", {}),
    421: ("Misdirected", "On a site of several boxes: this box holds no copy of the tenant (X-Appliance-Home names "
                         "its home box; send requests through the site's balancer)", {}),
    413: ("BodyTooLarge", "Body larger than the route's limit (server.max_body_bytes for documents, "
                          "max_query_body_bytes for search and ask, max_chat_body_bytes for chat), or with more "
                          "than server.max_json_values values", {}),
    415: ("UnsupportedMediaType", "The body is not sent as Content-Type: application/json", {}),
    422: ("Invalid", "A field is wrong; error.field names it", {}),
    429: ("RateLimited", "The tenant's request rate is over its limit, or a bounded queue's share (a re-index) is "
                         "full", {"Retry-After": _RETRY_AFTER}),
    503: ("NotReady", "Warming up, boot failed, or overloaded", {"Retry-After": _RETRY_AFTER}),
}
ANY_ERRORS = (403,)  # any request: a Host or Origin that is not allowed
V1_ERRORS = (401, 429, 503)  # any /v1/* request may meet these (admission, then readiness)
# any request naming a tenant (a wrong name, another than the API key's, or one placed on other boxes)
TENANT_ERRORS = (403, 421, 422)
BODY_ERRORS = (400, 413, 415, 422)  # any request with a JSON body


@dataclass(frozen=True, slots=True)
class Param:
    name: str
    where: str  # query, path, header
    spec: Spec
    description: str = ""


@dataclass(frozen=True, slots=True)
class Operation:
    """One route of the API as the OpenAPI document describes it."""
    method: str
    path: str
    summary: str
    ok: str  # what a 2xx answer means
    ok_status: str = "200"
    ok_schema: dict = field(default_factory=lambda: {"type": "object"})
    ok_media: tuple[str, ...] = ("application/json",)
    event_schema: dict = field(default_factory=dict)  # text/event-stream: one event, as {event, data, id, retry}
    body: Spec | None = None
    upload: dict | None = None  # a multipart/form-data body, as its OpenAPI schema (JSON bodies are `body`)
    params: tuple[Param, ...] = ()
    errors: tuple[int, ...] = ()  # beyond ANY_, V1_, TENANT_ and BODY_ERRORS, which follow from the rest
    extra: dict = field(default_factory=dict)  # further responses: status -> response object

    @property
    def v1(self) -> bool:
        return self.path.startswith("/v1/")

    @property
    def keyed(self) -> bool:
        """Needs an API key where keys are configured: the API and the metrics."""
        return self.v1 or self.path == "/metrics"

    @property
    def names_tenant(self) -> bool:
        return any(p.name == "tenant" for p in self.params) or bool(self.body and "tenant" in self.body.fields)


def _sse_event(description: str, names: tuple[str, ...] = ()) -> dict:
    event = {"type": "string", "enum": list(names)} if names else {"type": "string", "description": "absent"}
    return {"type": "object", "description": description, "required": ["data"],
            "properties": {"event": event, "data": {"type": "string"}}}


_TENANT = Param("tenant", "query", Spec("string", "Tenant (where API keys are configured: the key's, which may "
                                        "be left out).", required=True, pattern=NAME_PATTERN))


def _document_operations(settings: Settings) -> list[Operation]:
    doc_id = Param("id", "path", DOCUMENT_ID)
    return [
        Operation("post", "/v1/documents", "Store and index documents", "Stored and indexed",
                  body=spec_of(IngestBody, settings), errors=(409,), extra={"202": {
                      "description": "Stored; indexing continues (wait: false, or the index build failed: see "
                                     "index_error)", "content": {"application/json": {"schema": {"type": "object"}}}}}),
        Operation("delete", "/v1/documents/{id}", "Delete a document", "Deleted", errors=(404,), extra={"202": {
                      "description": "Deleted in the store; the index build failed or is still running (see "
                                     "index_error): searches may still find it until it catches up",
                      "content": {"application/json": {"schema": {"type": "object"}}}}}, params=(
            doc_id, _TENANT,
            Param("partition", "query", Spec("string", "Only this partition (default: every partition of the "
                                             "tenant).", pattern=NAME_PATTERN)))),
        Operation("get", "/v1/documents", "A partition's documents in id order, a page at a time", "Documents",
                  errors=(404,), params=(
                      _TENANT, Param("partition", "query", Spec("string", "Partition name.", required=True,
                                                                pattern=NAME_PATTERN)),
                      Param("after", "query", Spec("string", "List from the first id after this one (the previous "
                                                   "page's `next`).", max=256, pattern=ID_PATTERN)),
                      Param("limit", "query", Spec("integer", "Most documents to list.", default=100, min=1,
                                                   max=1000)))),
        Operation("post", "/v1/files", "Parse, store and index files (PDF, DOCX, PPTX, HTML, Markdown, text); one "
                  "answer per file", "Stored (and indexed); files that failed say why", upload=files_upload(),
                  errors=(409, 415), extra={"202": {
                      "description": "Stored; indexing continues", "content": {"application/json": {
                          "schema": {"type": "object"}}}}}),
        Operation("get", "/v1/documents/{id}/file", "A document's original file (a download)", "The file",
                  ok_schema={"type": "string", "format": "binary"}, ok_media=("application/octet-stream",),
                  errors=(404,), params=(doc_id, _TENANT, Param("partition", "query", Spec(
                      "string", "Only this partition.", pattern=NAME_PATTERN)))),
    ]


def _partition_operations() -> list[Operation]:
    name = Param("name", "path", Spec("string", "Partition name.", required=True, pattern=NAME_PATTERN))
    job = {"type": "object", "required": ["tenant", "partition", "state"], "properties": {
        "tenant": {"type": "string"}, "partition": {"type": "string"},
        "state": {"type": "string", "enum": ["queued", "running", "done", "failed"]},
        "language": {"type": "string", "nullable": True}, "tokens": {"type": "boolean"},
        "ahead": {"type": "integer", "description": "Re-indexes that end before this queued one starts."},
        "asked_at": {"type": "number"}, "started_at": {"type": "number", "nullable": True},
        "ended_at": {"type": "number", "nullable": True},
        "result": {"type": "object", "nullable": True, "description": "The partition once done."},
        "error": {"type": "string", "nullable": True}}}
    return [
        Operation("get", "/v1/partitions", "A tenant's partitions", "Partitions", params=(_TENANT,)),
        Operation("get", "/v1/partitions/{name}", "One partition: language, encoder, versions, documents, index size "
                  "and its own dense weight (null: its language's)", "The partition", params=(name, _TENANT),
                  errors=(404,)),
        Operation("patch", "/v1/partitions/{name}", "A partition's settings: its own weight of the vector list in "
                  "hybrid fusion (the next search uses it; answers cached with the old weight are not served)",
                  "The partition", body=spec_of(PartitionSettingsBody), params=(name,), errors=(404, 409)),
        Operation("post", "/v1/partitions/{name}/reindex", "Re-index a partition in the background: another "
                  "language (and its encoder), the same one again, or its token vectors re-coded; queued, one at a "
                  "time on a box, tenants taking turns", "Queued or started (Location: where to ask how it "
                  "stands)", ok_status="202", ok_schema=job, body=spec_of(ReindexBody), params=(name,),
                  errors=(404, 409)),
        Operation("get", "/v1/partitions/{name}/reindex", "How the partition's last re-index since the server "
                  "started stands", "The re-index", ok_schema=job, params=(name, _TENANT), errors=(404,)),
    ]


def operations(settings: Settings) -> list[Operation]:
    """Every route the server answers, in the order the document lists them."""
    native_event = _sse_event("One event; data is a JSON object.", ("sources", "token", "done", "error"))
    openai_event = _sse_event("One event, unnamed; data is a chat.completion.chunk as JSON, or [DONE] last.")
    sse = ("application/json", "text/event-stream")
    return [
        *_document_operations(settings),
        Operation("post", "/v1/search", "Hybrid search (BM25 + HNSW, RRF, late interaction)",
                  "Ranked chunks with per-stage timings", body=spec_of(SearchBody, settings)),
        *_partition_operations(),
        Operation("post", "/v1/ask", "RAG answer with sources, route and timings (JSON, or SSE with stream: true)",
                  "The answer (JSON), or its Server-Sent Events", ok_media=sse, event_schema=native_event,
                  body=spec_of(AskBody, settings)),
        Operation("post", "/v1/chat/completions", "OpenAI-compatible chat completion over the tenant's documents",
                  "A chat completion (JSON), or its chunks as Server-Sent Events", ok_media=sse,
                  event_schema=openai_event, body=spec_of(ChatBody, settings), params=(
                      Param("X-Tenant", "header", Spec("string", pattern=NAME_PATTERN),
                            "Tenant when the body names none (default: the API key's, else default)."),)),
        Operation("get", "/v1/models", "The routes a client can name as model", "Model list"),
        Operation("get", "/v1/engines", "Engine states and statistics", "Engines"),
        Operation("get", "/v1/cache/entries", "A tenant's semantic-cache entries, newest first", "Cache entries",
                  ok_schema={"type": "object", "required": ["tenant", "entries"], "properties": {
                      "tenant": {"type": "string"}, "entries": {"type": "array", "items": {"type": "object"}}}},
                  params=(_TENANT, Param("limit", "query", Spec("integer", "Most entries to list.", default=100,
                                                                min=1, max=1000)))),
        Operation("delete", "/v1/cache/entries/{id}", "Drop one semantic-cache entry", "Dropped", errors=(404,),
                  params=(Param("id", "path", Spec("integer", "Entry id, from GET /v1/cache/entries.",
                                                   required=True, min=0)), _TENANT)),
        Operation("get", "/metrics", "Prometheus metrics (text exposition format)", "Metrics",
                  ok_schema={"type": "string"}, ok_media=("text/plain",), errors=(401,)),
        Operation("get", "/healthz", "The process is up", "Alive"),
        Operation("get", "/readyz", "Warm-up is done and requests are served", "Ready", extra={"503": {
            "description": "Starting (on a site: catching up from the other boxes), draining after SIGTERM, "
                           "stopping, or boot failed (then error says why)",
            "content": {"application/json": {"schema": {"type": "object", "required": ["status"], "properties": {
                "status": {"type": "string", "enum": ["starting", "draining", "stopping", "failed"]},
                "error": {"type": "string"}}}}}}}),
        Operation("get", "/openapi.json", "This document", "OpenAPI 3.0 document"),
        *_console_operations(),
        *_cluster_operations(),
    ]


def _cluster_operations() -> list[Operation]:
    """Between the boxes of a site only (the cluster secret as the bearer token; the balancer refuses them)."""
    box = Param("box", "query", Spec("string", "The asking box's name.", required=True, max=63))
    return [
        Operation("get", "/cluster/journal", "This box's journal after an entry, for the tenants the asking box "
                  "holds, with each document's current state", "Entries, `next` and `more`", errors=(401, 404, 422),
                  params=(Param("after", "query", Spec("integer", "The last entry applied.", min=0)), box,
                          Param("store", "query", spec_of(SyncBody).fields["store"]))),
        Operation("get", "/cluster/files/{sha256}", "An original file this box holds", "The bytes",
                  ok_schema={"type": "string", "format": "binary"}, ok_media=("application/octet-stream",),
                  errors=(401, 404), params=(Param("sha256", "path", Spec("string", "The file's sha256.",
                                                                           required=True, max=64)),)),
        Operation("post", "/cluster/sync", "Pull from the asking box now; answer once its entry `seq` is applied "
                  "(or after cluster.sync_timeout_s)", "The last entry applied", body=spec_of(SyncBody), errors=(401, 404)),
        Operation("get", "/cluster/status", "Where this box's tenants live and how far each peer is behind",
                  "The status", errors=(401, 404)),
    ]


def _console_operations() -> list[Operation]:
    page = {"ok_schema": {"type": "string"}}
    return [
        Operation("get", "/", "The console (a page: the box, documents, ask, cache)", "The page", **page,
                  ok_media=("text/html",)),
        Operation("get", "/console/{name}", "One of the console's files", "The file", **page, errors=(404,),
                  ok_media=("text/javascript", "text/css", "image/svg+xml"), params=(Param("name", "path", Spec(
                      "string", "File name.", required=True, max=100)),)),
        Operation("get", "/v1/whoami", "Who the API key lets in: its tenant, or every tenant", "The caller"),
        Operation("get", "/v1/admin/overview", "The box at a glance (an admin key's)", "The overview"),
    ]


def files_upload() -> dict[str, Any]:
    return {"type": "object", "required": ["partition", "file"], "additionalProperties": False, "properties": {
        "tenant": {"type": "string", "pattern": NAME_PATTERN, "description": "Default: the API key's tenant."},
        "partition": {"type": "string", "pattern": NAME_PATTERN, "description": "Created on first use."},
        "kind": {"type": "string", "pattern": NAME_PATTERN, "description": "Document type of a new partition."},
        "language": {"type": "string", "enum": list(LANGUAGE_CHOICES), "description": LANGUAGE_HELP},
        "wait": {"type": "string", "enum": ["true", "false"], "description": "Answer once searchable (default)."},
        "metadata": {"type": "string", "description": "A JSON object, given to every file's document."},
        "file": {"type": "array", "items": {"type": "string", "format": "binary"}, "description": "The files; "
                 "each part's file name is its document id."}}}


def openapi(settings: Settings) -> dict[str, Any]:
    keyed = _keys_configured(settings)
    paths: dict[str, dict] = {}
    for op in operations(settings):
        responses: dict[str, Any] = {op.ok_status: {"description": op.ok, "content": {
            media: {"schema": op.event_schema if media == "text/event-stream" else op.ok_schema}
            for media in op.ok_media}}}
        responses.update(op.extra)
        codes = set(op.errors) | set(ANY_ERRORS) | (set(V1_ERRORS) if op.v1 else set())
        codes |= set(BODY_ERRORS) if op.body or op.upload else set()
        codes |= (set(TENANT_ERRORS) if op.names_tenant else set()) | ({422} if op.params else set())
        for code in sorted(codes):
            responses[str(code)] = {"$ref": f"#/components/responses/{ERRORS[code][0]}"}
        entry: dict[str, Any] = {"summary": op.summary, "operationId": _operation_id(op), "responses": responses}
        if op.params:
            entry["parameters"] = [_parameter(p, keyed) for p in op.params]
        if op.body:
            schema = to_schema(op.body)
            if keyed and "tenant" in schema.get("required", ()):  # the key's tenant fills it in
                schema["required"] = [name for name in schema["required"] if name != "tenant"]
                schema["properties"]["tenant"]["nullable"] = True
            entry["requestBody"] = {"required": True, "content": {"application/json": {"schema": schema}}}
        if op.upload:
            entry["requestBody"] = {"required": True, "content": {"multipart/form-data": {"schema": op.upload}}}
        if op.keyed:
            # Keys are checked only where the server has some configured; without, requests go through unnamed.
            entry["security"] = [{"bearerAuth": []}] if keyed else [{"bearerAuth": []}, {}]
        paths.setdefault(op.path, {})[op.method] = entry
    return {
        "openapi": "3.0.3",
        "info": {"title": "rag-appliance", "version": "0.1.0",
                 "description": "Offline RAG answer server: ingest documents into partitions, search them, "
                                "ask questions answered from them."},
        "paths": paths,
        "components": {
            "securitySchemes": {"bearerAuth": {"type": "http", "scheme": "bearer",
                                               "description": "An API key from admission.keys_file; it names the "
                                                              "tenant, whose rate limit the request counts against."}},
            "schemas": {"Error": ERROR_SCHEMA},
            "responses": {name: {"description": description, "content": {"application/json": {"schema": {
                "$ref": "#/components/schemas/Error"}}}, **({"headers": headers} if headers else {})}
                for name, description, headers in ERRORS.values()},
        },
    }


def _keys_configured(settings: Settings) -> bool:
    admission = getattr(settings, "admission", None)
    return bool(getattr(admission, "keys_file", ""))


def _operation_id(op: Operation) -> str:
    words = [w for w in op.path.replace("{", "").replace("}", "").replace(".", "_").split("/") if w]
    return "_".join([op.method, *words])


def _parameter(p: Param, keyed: bool) -> dict[str, Any]:
    required = p.where == "path" or (p.spec.required and not (keyed and p.name == "tenant"))
    out: dict[str, Any] = {"name": p.name, "in": p.where, "required": required, "schema": to_schema(p.spec)}
    if p.description or p.spec.description:
        out["description"] = p.description or p.spec.description
        out["schema"].pop("description", None)
    return out


def to_schema(spec: Spec, nullable: bool = False) -> dict[str, Any]:
    """`nullable`: an optional field of an object, where validate() reads null as absent (OpenAI clients send
    null for fields they leave unset)."""
    schema: dict[str, Any] = {}
    if spec.description:
        schema["description"] = spec.description
    if spec.type == "any":
        return schema
    if nullable:
        schema["nullable"] = True
    if spec.type == "timestamp":
        schema["oneOf"] = [{"type": "number"}, {"type": "string", "format": "date-time"}]
        return schema
    schema["type"] = spec.type
    if spec.type == "object" and not spec.free_form:
        schema["properties"] = {name: to_schema(sub, nullable=not sub.required) for name, sub in spec.fields.items()}
        schema["additionalProperties"] = spec.extra
        required = [name for name, sub in spec.fields.items() if sub.required]
        if required:
            schema["required"] = required
    if spec.type == "array":
        assert spec.items is not None
        schema["items"] = to_schema(spec.items)
        _bounds(schema, spec, "minItems", "maxItems")
    elif spec.type == "string":
        _bounds(schema, spec, "minLength", "maxLength")
        if spec.pattern:
            schema["pattern"] = spec.pattern
        if spec.choices:
            schema["enum"] = list(spec.choices) + ([None] if nullable else [])  # OpenAPI 3.0: enum must list null
    elif spec.type in ("integer", "number"):
        _bounds(schema, spec, "minimum", "maximum")
    if spec.default is not None:
        schema["default"] = spec.default
    return schema


def _bounds(schema: dict, spec: Spec, low: str, high: str) -> None:
    if spec.min is not None:
        schema[low] = int(spec.min)
    if spec.max is not None:
        schema[high] = int(spec.max)
