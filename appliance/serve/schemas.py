"""The request bodies of the HTTP API and the OpenAPI document built from them."""
from __future__ import annotations

from typing import Any

from ..config import Settings
from .validation import NAME_PATTERN, Spec


def ingest_body(settings: Settings) -> Spec:
    document = Spec("object", "A document to store and index.", fields={
        "id": Spec("string", "Document id, unique within the partition; default: a hash of the content.",
                   min=1, max=256),
        "title": Spec("string", "Title; also indexed.", default="", max=1000),
        "text": Spec("string", "Full text; chunked at ingest.", required=True, min=1,
                     max=settings.server.max_body_bytes, blank=False),
        "source": Spec("string", "Where the document came from (path, URL, system).", default="", max=2000),
        "metadata": Spec("object", "Free-form JSON object returned with results.", free_form=True, max=65536),
        "time": Spec("timestamp", "Document time (epoch seconds or ISO 8601); selects partitions by time range."),
    })
    return Spec("object", fields={
        "tenant": Spec("string", "Tenant the partition belongs to.", required=True, pattern=NAME_PATTERN),
        "partition": Spec("string", "Partition name (created on first use).", required=True, pattern=NAME_PATTERN),
        "kind": Spec("string", "Document type of a new partition (default \"default\"), used by search "
                     "filters; naming another kind for an existing partition is a 409.", pattern=NAME_PATTERN),
        "wait": Spec("boolean", "Return only once the documents are searchable (default true).", default=True),
        "documents": Spec("array", "Documents to store.", required=True, min=1,
                          max=settings.server.max_documents_per_request, items=document),
    })


def search_body(settings: Settings) -> Spec:
    return Spec("object", fields={
        "tenant": Spec("string", "Tenant to search.", required=True, pattern=NAME_PATTERN),
        "query": Spec("string", "The question or keywords.", required=True, min=1, max=4000, blank=False),
        "k": Spec("integer", "Number of results.", default=settings.retrieve.default_k, min=1,
                  max=settings.retrieve.max_k),
        "partitions": Spec("array", "Partition names to search; default: all of the tenant's.", min=1, max=1000,
                           items=Spec("string", pattern=NAME_PATTERN)),
        "filters": Spec("object", "Partition metadata filters, applied before any search.", fields={
            "kinds": Spec("array", "Partition kinds to include.", min=1, max=100,
                          items=Spec("string", pattern=NAME_PATTERN)),
            "time_from": Spec("timestamp", "Only partitions holding documents at or after this time."),
            "time_to": Spec("timestamp", "Only partitions holding documents at or before this time."),
        }),
        "late_interaction": Spec("boolean", "Override the late-interaction stage for this request."),
    })


def ask_body(settings: Settings) -> Spec:
    return Spec("object", fields={
        "tenant": Spec("string", "Tenant whose documents answer the question.", required=True, pattern=NAME_PATTERN),
        "question": Spec("string", "The question.", required=True, min=1, max=4000, blank=False),
        "partitions": Spec("array", "Partition names to use; default: all of the tenant's.", min=1, max=1000,
                           items=Spec("string", pattern=NAME_PATTERN)),
        "model": Spec("string", "auto (the router decides), small or large.", default="auto",
                      choices=("auto", "small", "large")),
        "task": Spec("string", "cited (answer citing passages [n]) or concise (shortest answer).", default="cited",
                     choices=("cited", "concise")),
        "stream": Spec("boolean", "Server-Sent Events: sources, then token deltas, then done.", default=False),
        "max_tokens": Spec("integer", "Answer length cap (the engine's own cap still applies).", min=1,
                           max=max(settings.small.max_tokens, settings.large.max_tokens)),
    })


def chat_body(settings: Settings) -> Spec:
    message = Spec("object", "A chat message; content is a string or a list of text parts.", extra=True, fields={
        "role": Spec("string", required=True, choices=("system", "user", "assistant", "tool", "developer")),
        "content": Spec("any", "The message text."),
    })
    return Spec("object", "OpenAI chat completion request; fields not listed are accepted and ignored.", extra=True,
                fields={
        "model": Spec("string", "auto, small or large.", required=True, choices=("auto", "small", "large")),
        "messages": Spec("array", "The conversation; the last user message is answered with RAG.", required=True,
                         min=1, max=256, items=message),
        "stream": Spec("boolean", default=False),
        "max_tokens": Spec("integer", min=1, max=max(settings.small.max_tokens, settings.large.max_tokens)),
        "max_completion_tokens": Spec("integer", min=1,
                                      max=max(settings.small.max_tokens, settings.large.max_tokens)),
        "tenant": Spec("string", "Tenant (else the X-Tenant header, else \"default\").", pattern=NAME_PATTERN),
        "partitions": Spec("array", "Partition names to use.", min=1, max=1000,
                           items=Spec("string", pattern=NAME_PATTERN)),
    })


_ERROR = {"type": "object", "properties": {"error": {"type": "object", "properties": {
    "code": {"type": "string"}, "message": {"type": "string"}, "field": {"type": "string"}},
    "required": ["code", "message"]}}}


def openapi(settings: Settings) -> dict[str, Any]:
    def body(spec: Spec) -> dict:
        return {"required": True, "content": {"application/json": {"schema": to_schema(spec)}}}

    def answers(ok: str, *codes: int) -> dict:
        out: dict[str, Any] = {"200": {"description": ok, "content": {"application/json": {"schema": {
            "type": "object"}}}}}
        for code in codes:
            out[str(code)] = {"description": _REASONS[code], "content": {"application/json": {"schema": _ERROR}}}
        return out

    name_param = {"schema": {"type": "string", "pattern": NAME_PATTERN}}
    return {
        "openapi": "3.0.3",
        "info": {"title": "rag-appliance", "version": "0.1.0",
                 "description": "Offline RAG answer server: ingest documents into partitions, search them, "
                                "ask questions answered from them."},
        "paths": {
            "/v1/documents": {"post": {"summary": "Store and index documents", "requestBody": body(
                ingest_body(settings)), "responses": {**answers("Stored and indexed", 400, 409, 413, 422, 503),
                                                      "202": {"description": "Stored; indexing continues"}}}},
            "/v1/documents/{id}": {"delete": {"summary": "Delete a document", "parameters": [
                {"name": "id", "in": "path", "required": True, "schema": {"type": "string", "maxLength": 256}},
                {"name": "tenant", "in": "query", "required": True, **name_param},
                {"name": "partition", "in": "query", "required": False, **name_param},
            ], "responses": answers("Deleted", 404, 422, 503)}},
            "/v1/search": {"post": {"summary": "Hybrid search (BM25 + HNSW, RRF, late interaction)",
                                    "requestBody": body(search_body(settings)),
                                    "responses": answers("Ranked chunks with per-stage timings", 400, 413, 422, 503)}},
            "/v1/partitions": {"get": {"summary": "A tenant's partitions", "parameters": [
                {"name": "tenant", "in": "query", "required": True, **name_param}],
                "responses": answers("Partitions", 422, 503)}},
            "/v1/ask": {"post": {"summary": "RAG answer with sources, route and timings (JSON, or SSE with "
                                 "stream: true)", "requestBody": body(ask_body(settings)),
                                 "responses": answers("The answer", 400, 413, 422, 503)}},
            "/v1/chat/completions": {"post": {"summary": "OpenAI-compatible chat completion over the tenant's "
                                              "documents", "requestBody": body(chat_body(settings)),
                                              "responses": answers("A chat completion", 400, 413, 422, 503)}},
            "/v1/models": {"get": {"summary": "The routes a client can name as model",
                                   "responses": answers("Model list")}},
            "/v1/engines": {"get": {"summary": "Engine states and statistics", "responses": answers("Engines")}},
            "/healthz": {"get": {"summary": "The process is up", "responses": answers("Alive")}},
            "/readyz": {"get": {"summary": "Warm-up is done and requests are served",
                                "responses": answers("Ready", 503)}},
        },
    }


_REASONS = {400: "Malformed body", 404: "Not found", 409: "Conflicts with stored state", 413: "Body too large",
            422: "A field is wrong",
            503: "Not ready or overloaded"}


def to_schema(spec: Spec) -> dict[str, Any]:
    schema: dict[str, Any] = {}
    if spec.description:
        schema["description"] = spec.description
    if spec.type == "any":
        return schema
    if spec.type == "timestamp":
        schema["oneOf"] = [{"type": "number"}, {"type": "string", "format": "date-time"}]
        return schema
    schema["type"] = spec.type
    if spec.type == "object" and not spec.free_form:
        schema["properties"] = {name: to_schema(sub) for name, sub in spec.fields.items()}
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
            schema["enum"] = list(spec.choices)
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
