"""One error type for the HTTP API, its JSON body `{"error": {"code", "message", "field"}}`, and the handlers.

Every refusal a route makes is an `ApiError` built by one of its constructors, so a status and its code always
travel together; the handlers also turn Starlette's own 404/405 and a full encoder queue into the same body.
"""
from __future__ import annotations

from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import JSONResponse

from ...encode import EncoderBusy
from ..observe.metrics import Metrics

RETRY_AFTER = {"Retry-After": "1"}  # every 503 is temporary: warming up, overloaded, an engine restarting


class ApiError(Exception):
    """A request the API refuses: HTTP `status`, a stable machine-readable `code`, and the `field` at fault."""

    def __init__(self, status: int, code: str, message: str, field: str | None = None,
                 headers: dict[str, str] | None = None) -> None:
        super().__init__(message)
        self.status, self.code, self.message, self.field = status, code, message, field
        self.headers = headers

    @classmethod
    def invalid(cls, message: str, field: str | None = None) -> "ApiError":
        """422: a field is wrong (its JSON path in `field`)."""
        return cls(422, "invalid_request", message, field)

    @classmethod
    def bad_body(cls, message: str, code: str = "invalid_json") -> "ApiError":
        """400: the body cannot be read at all (not UTF-8, not JSON, empty, nested too deeply)."""
        return cls(400, code, message)

    @classmethod
    def too_large(cls, limit: int) -> "ApiError":
        return cls(413, "body_too_large", f"body is larger than {limit} bytes")

    @classmethod
    def unauthorized(cls, message: str) -> "ApiError":
        return cls(401, "unauthorized", message, headers={"WWW-Authenticate": "Bearer"})

    @classmethod
    def too_many_values(cls, limit: int) -> "ApiError":
        return cls(413, "too_many_values", f"body has more than {limit} JSON values (arrays, objects and items)")

    @classmethod
    def unsupported_media_type(cls, given: str, expected: str = "application/json") -> "ApiError":
        return cls(415, "unsupported_media_type", f"send Content-Type: {expected} (got {given[:60]!r})",
                   "Content-Type")

    @classmethod
    def forbidden(cls, message: str, field: str | None = None) -> "ApiError":
        return cls(403, "forbidden", message, field)

    @classmethod
    def misdirected(cls, tenant: str, home: str) -> "ApiError":
        """421: on a site of several boxes, this box holds no copy of the tenant (the balancer sends it home)."""
        return cls(421, "misdirected", f"tenant {tenant!r} lives on box {home!r}, not on this one: send its "
                   "requests through the site's balancer (or with X-Tenant)", "tenant", {"X-Appliance-Home": home})

    @classmethod
    def not_found(cls, message: str, field: str | None = None) -> "ApiError":
        return cls(404, "not_found", message, field)

    @classmethod
    def quota_exceeded(cls, message: str, field: str | None = None) -> "ApiError":
        """413: storing this would take the tenant past a [quota] limit (the message names it)."""
        return cls(413, "quota_exceeded", message, field)

    @classmethod
    def conflict(cls, code: str, message: str, field: str | None = None,
                 headers: dict[str, str] | None = None) -> "ApiError":
        return cls(409, code, message, field, headers)

    @classmethod
    def too_many(cls, code: str, message: str, retry_after_s: int = 10) -> "ApiError":
        """429: a bounded queue's share for this client is full; try again later."""
        return cls(429, code, message, headers={"Retry-After": str(retry_after_s)})

    @classmethod
    def unavailable(cls, code: str, message: str) -> "ApiError":
        return cls(503, code, message, headers=RETRY_AFTER)

    def body(self) -> dict:
        error = {"code": self.code, "message": self.message}
        if self.field:
            error["field"] = self.field
        return {"error": error}


def _metrics(request: Request) -> Metrics:
    return request.app.state.edge.metrics


def _endpoint(request: Request) -> str:
    record = request.scope.get("state", {}).get("record")  # set by the admission middleware on /v1/ paths
    return record.endpoint if record is not None else "other"


async def api_error(request: Request, exc: Exception) -> JSONResponse:
    assert isinstance(exc, ApiError)
    if exc.status in (400, 413, 422):  # refused before any work: counted like admission's refusals
        _metrics(request).rejected("too_large" if exc.status == 413 else "invalid", _endpoint(request))
    return JSONResponse(exc.body(), status_code=exc.status, headers=exc.headers)


async def encoder_busy(request: Request, exc: Exception) -> JSONResponse:
    _metrics(request).rejected("overloaded", _endpoint(request))
    return JSONResponse({"error": {"code": "overloaded", "message": str(exc)}}, status_code=503,
                        headers=RETRY_AFTER)


async def http_error(request: Request, exc: Exception) -> JSONResponse:
    """Starlette's own 404 (no such route) and 405 (route without that method) in the API's error body."""
    assert isinstance(exc, HTTPException)
    if exc.status_code == 404:
        code, message = "not_found", f"no route {request.url.path}"
    elif exc.status_code == 405:
        allowed = (exc.headers or {}).get("Allow", "")
        code, message = "method_not_allowed", f"{request.method} is not allowed on {request.url.path}; " \
                                              f"allowed: {allowed}"
    else:
        code, message = "http_error", str(exc.detail)
    return JSONResponse({"error": {"code": code, "message": message}}, status_code=exc.status_code,
                        headers=exc.headers)


EXCEPTION_HANDLERS = {ApiError: api_error, EncoderBusy: encoder_busy, HTTPException: http_error}
