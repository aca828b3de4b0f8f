"""Admission: API key -> tenant, a token bucket per tenant while tenants compete, and requests in progress bounded
in all and per tenant (slots.py); a body sent too slowly ends in 408, a client that leaves cancels its work (watch.py).

Runs as ASGI middleware in front of every /v1/ route, so a refused request costs no body parsing, no encoder
time and no memory beyond its headers. Keys are stored as SHA-256 hashes: the keys file can be read by an
operator without revealing a usable key (keys are 32 random bytes, so a fast hash is enough).
"""
from __future__ import annotations

import asyncio
import json
import math
import re
import time
import uuid
from collections import OrderedDict
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from starlette.requests import ClientDisconnect
from starlette.routing import BaseRoute, Match, Route
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from ...timings import Stage, ms_since
from ..observe.metrics import RequestRecord
from .keys import ApiKeys
from .slots import TenantSlots
from .watch import BodyPace, BodyTimeout, ClientWatch

_REQUEST_ID = re.compile(r"^[A-Za-z0-9._\-]{1,64}$")
MAX_BUCKETS = 10_000  # open mode keys buckets by client address: keep memory bounded
CLIENT_GONE = 499  # status recorded for a request whose client left before any reply (nginx's code)
# Work cancelled when its client leaves: answers only (read-only, and costly); an ingest or delete goes on, so
# that what the store acknowledged is also indexed.
CANCEL_ON_DISCONNECT = frozenset({"ask", "chat"})
# An admin's console polls the overview every few seconds (and asks whoami at each start): these must not make a
# tenant alone on the box look shared (which would put it under the token bucket and halve its slots), so they
# take a slot but never count as arriving. On a box without keys the console's requests count as any client's.
PASSIVE_FOR_ADMIN = frozenset({"overview", "whoami"})
ADMIN_HOLDER = "role:admin"  # ':' is in no tenant name, so no tenant shares the admins' slots


class TokenBuckets:
    """`rate` requests per second sustained, `burst` at once, per tenant."""

    def __init__(self, rate: float, burst: int):
        self.rate, self.burst = rate, burst
        self._buckets: OrderedDict[str, tuple[float, float]] = OrderedDict()  # name -> (tokens, last refill)

    def take(self, name: str) -> float:
        """0 if admitted, else the seconds until a token is available."""
        now = time.monotonic()
        tokens, last = self._buckets.pop(name, (float(self.burst), now))
        tokens = min(self.burst, tokens + (now - last) * self.rate)
        admitted = tokens >= 1
        self._buckets[name] = (tokens - 1 if admitted else tokens, now)
        while len(self._buckets) > MAX_BUCKETS:
            self._buckets.popitem(last=False)
        return 0.0 if admitted else (1 - tokens) / self.rate


@dataclass(slots=True)
class Gate:
    """What the middleware decides with, shared with the app (which reads `in_flight` for /metrics)."""
    keys: ApiKeys | None
    buckets: TokenBuckets
    max_in_flight: int
    on_reject: Callable[[str, str], None]  # (reason, endpoint)
    on_finish: Callable[[RequestRecord], None]
    pace: BodyPace = BodyPace()
    slots: TenantSlots = field(init=False)

    def __post_init__(self) -> None:
        self.slots = TenantSlots(self.max_in_flight)

    @property
    def in_flight(self) -> int:
        return self.slots.total


@dataclass(frozen=True, slots=True)
class Refusal:
    reason: str  # one of metrics.REJECT_REASONS, also the error code
    status: int
    message: str
    headers: dict[str, str] = field(default_factory=dict)


class Admission:
    """ASGI middleware for /v1/ paths. Sets scope["state"]: `tenant` (the key's; None without keys or for an admin
    key), `admin` (an admin key: may name any tenant and see the box),
    `request_id`, and `record`, which the routes fill (cache layer, route, timings) and which is reported once
    the response, streamed or not, has been sent. A request's endpoint, for metrics and the request log, is the
    `name` of the route its path matches (any method: a 405 still counts against its resource)."""

    def __init__(self, app: ASGIApp, gate: Gate, routes: Sequence[BaseRoute] = ()):
        self.app, self.gate = app, gate
        self.routes = [r for r in routes if isinstance(r, Route) and r.path.startswith("/v1/")]

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or not scope["path"].startswith("/v1/"):
            await self.app(scope, receive, send)
            return
        gate = self.gate
        headers = {k.decode("latin-1").lower(): v.decode("latin-1") for k, v in scope["headers"]}
        given = headers.get("x-request-id", "")
        request_id = given if _REQUEST_ID.match(given) else uuid.uuid4().hex
        endpoint = self._endpoint(scope)
        record = RequestRecord(request_id, endpoint, None, 0, started=time.time())
        state = scope.setdefault("state", {})
        state.update(request_id=request_id, record=record, tenant=None, admin=False)
        clock = time.perf_counter()

        async def send_tracked(message) -> None:
            if message["type"] == "http.response.start":
                record.status = message["status"]
                message["headers"] = [*message.get("headers", []), (b"x-request-id", request_id.encode())]
            await send(message)

        try:
            refusal, name = self._check(headers, scope, record)
            if refusal is not None:
                gate.on_reject(refusal.reason, endpoint)
                await _refuse(send_tracked, refusal)
                return
            state["tenant"] = record.tenant
            try:
                await self._watched(scope, receive, send_tracked, record)
            finally:
                gate.slots.release(name)
        finally:
            record.timings.setdefault(Stage.TOTAL, ms_since(clock))  # a route that measured its own keeps it
            record.status = record.status or 500
            gate.on_finish(record)

    def _endpoint(self, scope: Scope) -> str:
        for route in self.routes:
            if route.matches(scope)[0] is not Match.NONE:
                return route.name
        return "other"

    async def _watched(self, scope: Scope, receive: Receive, send: Send, record: RequestRecord) -> None:
        """The app, in a task of its own that a client who leaves cancels if it asked for an answer (a non-streamed
        one would otherwise run to its end, engine request included); a body sent too slowly gets 408 and the
        connection closed."""
        started = False
        work: asyncio.Future | None = None
        cancel = record.endpoint in CANCEL_ON_DISCONNECT
        watch = ClientWatch(receive, self.gate.pace, lambda: cancel and work is not None and work.cancel())

        async def send_watched(message: Message) -> None:
            nonlocal started
            started = True
            if message["type"] == "http.response.body" and not message.get("more_body", False):
                watch.responded = True
            await send(message)

        work = asyncio.ensure_future(self.app(scope, watch.receive, send_watched))
        try:
            await work
        except BodyTimeout as exc:
            if started:
                raise
            self.gate.on_reject("slow_body", record.endpoint)
            await _refuse(send, Refusal("slow_body", 408, str(exc), {"Connection": "close"}))
        except (asyncio.CancelledError, ClientDisconnect):
            current = asyncio.current_task()
            if not watch.gone.is_set() or (current is not None and current.cancelling()):
                raise  # not the client leaving: the server is stopping
            if not started:
                record.status = CLIENT_GONE
        finally:
            watch.close()

    def _check(self, headers: dict, scope: Scope, record: RequestRecord) -> tuple[Refusal | None, str]:
        """(None, the slot's holder) to admit; a slot is then taken, to be released under that name."""
        gate = self.gate
        if gate.keys is not None:
            auth = headers.get("authorization", "")
            caller = gate.keys.caller_for_header(auth)
            if caller is None and gate.keys.unavailable is not None:  # failed closed: the log says why
                return Refusal("keys_unavailable", 503, "the server cannot read its API keys file: every keyed "
                               "request is refused until an operator restores it", {"Retry-After": "5"}), ""
            if caller is None:
                message = "invalid API key" if auth else "missing API key: send Authorization: Bearer <key>"
                return Refusal("unauthorized", 401, message, {"WWW-Authenticate": "Bearer"}), ""
            record.tenant = caller.tenant
            scope["state"]["admin"] = caller.admin
        admin = scope["state"].get("admin", False)
        # an admin's requests share one holder name: admins are operators, not tenants to be kept apart
        holder = ADMIN_HOLDER if admin else "client:" + (scope.get("client") or ("?",))[0]
        name = record.tenant if record.tenant is not None else holder
        passive = admin and record.endpoint in PASSIVE_FOR_ADMIN
        # The bucket protects tenants from each other, so it applies only while another tenant competes: alone, a
        # tenant may use all the room the box has (bounded by its slots and, for answers, the engines' queues).
        if not passive and gate.slots.arrive(name) and (wait := gate.buckets.take(name)) > 0:
            return Refusal("rate_limited", 429, f"rate limit of {gate.buckets.rate:g} requests/s exceeded while "
                           "other tenants use the server", {"Retry-After": str(max(1, math.ceil(wait)))}), name
        why = gate.slots.acquire(name)
        if why is not None:
            return Refusal("overloaded", 503, why, {"Retry-After": "1"}), name
        return None, name


async def _refuse(send: Send, refusal: Refusal) -> None:
    body = json.dumps({"error": {"code": refusal.reason, "message": refusal.message}}).encode()
    raw = [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode()),
           *((k.lower().encode(), v.encode()) for k, v in refusal.headers.items())]
    await send({"type": "http.response.start", "status": refusal.status, "headers": raw})
    await send({"type": "http.response.body", "body": body})
