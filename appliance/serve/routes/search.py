"""POST /v1/search (hybrid search)."""
from __future__ import annotations

from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Route

from ..api.requests import SearchBody
from ..edge import read_body, require_ready
from ..http.responses import hit_json


async def search(request: Request) -> JSONResponse:
    retriever = require_ready(request).retriever
    body = await read_body(request, SearchBody)
    result = await retriever.search(body.query, body.where, body.k, body.late_interaction)
    timings = result.timings.as_dict()
    request.state.record.timings.update(timings)
    return JSONResponse({"results": [hit_json(h) for h in result.hits], "partitions": result.partitions,
                         "encoders": list(result.encoders), "timings_ms": timings})


routes = [
    Route("/v1/search", search, methods=["POST"], name="search"),
]
