"""Requests from web pages: only JSON bodies, only known Host names, no cross-site Origin.

Without API keys any client is any tenant, so a browser must not become a client: a page on another site can send
a "simple" cross-site POST (text/plain or a form, no CORS preflight) that would ingest or delete documents, and
with DNS rebinding (its own name resolving to 127.0.0.1) it can read every answer, since the browser then treats
the server as the page's own origin. Refused here before any body is read: a POST (or PATCH) to a JSON route without
`Content-Type: application/json` (415), a Host that is neither loopback, nor `server.host`, nor listed in
`server.allowed_hosts`, and an `Origin` whose host is not one of those, or whose port is not the one the request
was sent to (403). Clients that are not browsers
(curl, the openai client) send a matching Host and no Origin, and are unaffected. POST /v1/files takes
multipart/form-data, which a page's form can send without a preflight: browsers send `Origin` with every
cross-site POST, so such a form is refused by the Origin check.
"""
from __future__ import annotations

import ipaddress
from collections.abc import Callable, Mapping, Sequence
from urllib.parse import urlsplit

from starlette.datastructures import Headers
from starlette.responses import JSONResponse
from starlette.routing import BaseRoute, Match, Route
from starlette.types import ASGIApp, Receive, Scope, Send

from ...config import ServerSettings
from .errors import ApiError

_WILDCARD_BINDS = frozenset({"", "0.0.0.0", "::"})  # a bind address that is every interface names no host
_BODY_METHODS = frozenset({"POST", "PUT", "PATCH"})
DEFAULT_PORTS = {"http": 80, "https": 443}


class HostPolicy:
    """Which host names a request may be addressed to, and a page may come from."""

    def __init__(self, server: ServerSettings, also: tuple[str, ...] = ()):
        """`also`: further names, e.g. the one the site's other boxes use for this one (cluster.members)."""
        names = {host_name(h) for h in (*server.allowed_hosts, *also)}
        if server.host not in _WILDCARD_BINDS:  # bound to one address: clients use that one
            names.add(host_name(server.host))
        self.names = frozenset(names - {""})
        self.port = server.port  # what a request without a Host header was sent to

    def allows(self, name: str) -> bool:
        return name == "localhost" or name in self.names or _is_loopback_ip(name)


def host_name(value: str) -> str:
    """The host part of a Host header or host setting, lower-case, without port, brackets or a final dot."""
    value = value.strip().lower()
    if value.startswith("["):  # [::1]:8080
        return value[1:value.find("]")] if "]" in value else ""
    if value.count(":") == 1:
        value = value.split(":", 1)[0]
    return value.rstrip(".")


def _is_loopback_ip(name: str) -> bool:
    try:
        return ipaddress.ip_address(name).is_loopback
    except ValueError:
        return False


class OriginCheck:
    """ASGI middleware: Host and Origin on every HTTP request, Content-Type on the POST and PATCH routes in `routes`
    (each takes a JSON body). `on_reject(reason, endpoint)` counts refusals as admission's are counted."""

    def __init__(self, app: ASGIApp, policy: HostPolicy, routes: Sequence[BaseRoute],
                 on_reject: Callable[[str, str], None], body_types: Mapping[str, str] | None = None):
        self.app, self.policy, self.on_reject = app, policy, on_reject
        types = body_types or {}
        self.body_routes = [(r, types.get(r.name, "application/json")) for r in routes
                            if isinstance(r, Route) and _BODY_METHODS & set(r.methods or ())]

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        error = self._check(scope)
        if error is None:
            await self.app(scope, receive, send)
            return
        record = scope.get("state", {}).get("record")  # set by admission on /v1/ paths
        self.on_reject("foreign_origin" if error.status == 403 else "invalid",
                       record.endpoint if record is not None else "other")
        await JSONResponse(error.body(), status_code=error.status)(scope, receive, send)

    def _check(self, scope: Scope) -> ApiError | None:
        headers = Headers(scope=scope)
        host = headers.get("host")
        if host is not None and not self.policy.allows(host_name(host)):
            return ApiError.forbidden(f"Host {host[:100]!r} is not served here; add it to server.allowed_hosts",
                                      "Host")
        origin = headers.get("origin")
        if origin is not None and not self._same_origin(origin, host, scope.get("scheme", "http")):
            return ApiError.forbidden(f"requests from web pages at {origin[:100]!r} are refused", "Origin")
        expected = self._body_type(scope) if scope["method"] in _BODY_METHODS else None
        if expected is not None:
            given = headers.get("content-type", "")
            if given.split(";", 1)[0].strip().lower() != expected:
                return ApiError.unsupported_media_type(given, expected)
        return None

    def _same_origin(self, origin: str, host: str | None, scheme: str) -> bool:
        """Whether a page at `origin` is this server's own: an allowed host, and the port the request was sent to
        (another port on the same host is another site, e.g. a dev server on localhost:3000). https is accepted
        beside the request's own scheme: a TLS proxy in front of the server sends plain http on."""
        try:
            page = urlsplit(origin.strip())
            page_port = page.port
        except ValueError:
            return False
        if page.scheme not in (scheme, "https") or not self.policy.allows((page.hostname or "").rstrip(".")):
            return False
        default = DEFAULT_PORTS[page.scheme]
        sent_to = host_port(host) if host is not None else self.policy.port
        return (page_port or default) == (sent_to or default)

    def _body_type(self, scope: Scope) -> str | None:
        # FULL: the path and this method (a path's GET shares the route and takes no body)
        return next((kind for route, kind in self.body_routes if route.matches(scope)[0] is Match.FULL), None)


def host_port(value: str) -> int | None:
    """The port of a Host header (None: none given, the scheme's default; or not a number)."""
    value = value.strip()
    tail = value[value.find("]") + 1:] if value.startswith("[") else value
    _, colon, port = tail.rpartition(":")
    return int(port) if colon and port.isdigit() else None
