"""What every route shares: the app's HTTP-side state, readiness, the caller's tenant, and reading a body.

`create_app` builds one `Edge` from the settings before anything boots and puts it on `app.state.edge`; the
services arrive later on `app.state.services`, and `require_ready` is the only way a route reaches them, so no
route can touch a service that is still starting (or already closed).
"""
from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum
from typing import TYPE_CHECKING, Any, TypeVar

from starlette.requests import Request

from ..config import Settings
from .admission.gate import Gate
from .api.bodies import BodyParser, BodySpecs, typed
from .api.validation import NAME_PATTERN, Spec, validate
from .http.errors import ApiError
from .observe.metrics import Metrics
from .observe.telemetry import Telemetry
from .uploads.spool import UploadSpool

if TYPE_CHECKING:
    from ..wiring import Services

B = TypeVar("B")
NAME = Spec("string", pattern=NAME_PATTERN, required=True)  # a tenant or partition named outside a body


@dataclass(frozen=True, slots=True)
class Edge:
    """The HTTP layer's own parts, which exist from the start (the services do not)."""
    settings: Settings
    bodies: BodySpecs
    openapi: dict[str, Any]
    metrics: Metrics
    telemetry: Telemetry
    gate: Gate
    parser: BodyParser
    spool: UploadSpool  # uploads in progress, on disk within a byte budget


class Phase(StrEnum):
    STARTING = "starting"
    READY = "ready"
    FAILED = "failed"
    STOPPING = "stopping"


@dataclass(frozen=True, slots=True)
class BootState:
    """Where the services' boot stands; replaced (never changed) on `app.state.boot` as it moves on."""
    phase: Phase
    error: str | None = None  # why the boot failed

    def not_ready(self) -> ApiError:
        if self.phase is Phase.FAILED:
            # why is in the log (and for an admin key on /readyz): paths and settings are no client's business
            return ApiError.unavailable("not_ready", "boot failed; the server's log says why")
        return ApiError.unavailable("not_ready", "shutting down" if self.phase is Phase.STOPPING else "warming up")


def edge(request: Request) -> Edge:
    return request.app.state.edge


def require_ready(request: Request) -> Services:
    """The services, or 503 while they start, after a failed boot, or once shutting down."""
    boot: BootState = request.app.state.boot
    if boot.phase is not Phase.READY:
        raise boot.not_ready()
    return request.app.state.services


def tenant_of(request: Request, given: str | None, field: str = "tenant") -> str:
    """The API key's tenant; a request may repeat it but never name another. Without keys, the given one."""
    key_tenant = request.state.tenant
    if given is not None:
        validate(given, NAME, field)
    if key_tenant is None:
        if given is None:
            raise ApiError.invalid("is required", field)
        tenant = given
    elif given is not None and given != key_tenant:
        raise ApiError.forbidden(f"this API key belongs to tenant {key_tenant!r}", field)
    else:
        tenant = key_tenant
    services = getattr(request.app.state, "services", None)
    if services is not None and services.cluster is not None:
        _check_placed(request, services.cluster, tenant)
    request.state.record.tenant = tenant
    return tenant


def _check_placed(request: Request, cluster, tenant: str) -> None:
    """On a site the balancer routes by X-Tenant: a request naming another tenant went to that one's boxes."""
    routed = request.headers.get("x-tenant")
    if routed is not None and routed != tenant:
        raise ApiError.invalid(f"X-Tenant is {routed[:64]!r} but the request is for tenant {tenant!r}: the balancer "
                               "routes by X-Tenant, so they must agree", "X-Tenant")
    if (home := cluster.misdirected(tenant)) is not None:
        raise ApiError.misdirected(tenant, home.name)


async def copies_json(request: Request, tenant: str, seq: int) -> dict[str, Any]:
    """On a site of several boxes: wait for the tenant's other box to store the write (or queue it there), and say
    where it is; {} on a box on its own."""
    cluster = require_ready(request).cluster
    if cluster is None:
        return {}
    copies = await cluster.replicate(tenant, seq)
    return {"copies": {"stored": list(copies.stored), "queued": list(copies.queued)}}


def tenant_param(request: Request) -> str:
    return tenant_of(request, request.query_params.get("tenant"))


def name_param(request: Request, name: str) -> str | None:
    """An optional partition-style name from the query string."""
    value = request.query_params.get(name)
    return None if value is None else validate(value, NAME, name)


async def read_body(request: Request, body: type[B]) -> B:
    """The JSON body as its typed object (requests.py): validated against its spec off the event loop, its tenant
    filled in from the API key when it names none, then checked for what the spec cannot say."""
    spec = edge(request).bodies[body]
    raw = await _read_raw(request, spec.max_bytes)
    value = await edge(request).parser.parse(raw, spec.spec, request.state.tenant)
    if value.get("tenant") is not None:
        value["tenant"] = tenant_of(request, value["tenant"])
    return typed(body, value, edge(request).settings.server)


async def _read_raw(request: Request, limit: int) -> bytes:
    """Stops reading at `limit` bytes, whatever Content-Length said (or whether it said anything)."""
    declared = request.headers.get("content-length")
    if declared is not None and declared.isdigit() and int(declared) > limit:
        raise ApiError.too_large(limit)
    chunks, size = [], 0
    async for chunk in request.stream():
        size += len(chunk)
        if size > limit:
            raise ApiError.too_large(limit)
        chunks.append(chunk)
    if not size:
        raise ApiError.bad_body("body is empty; a JSON object is expected")
    return b"".join(chunks)
