"""The Starlette application: its HTTP-side parts, the routes, and the services' lifecycle.

The services boot in the background so /healthz answers at once while /readyz (and every API route) says 503
until warm-up is done; a load balancer or systemd probe can tell "starting" from "dead".
"""
from __future__ import annotations

import asyncio
import contextlib
import gc
import logging
import time
from collections.abc import AsyncIterator, Callable
from contextlib import AbstractAsyncContextManager
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from starlette.applications import Starlette
from starlette.middleware import Middleware

from .. import wiring
from ..config import Settings
from ..parse import PoolStats
from .admission.gate import Admission, Gate, TokenBuckets
from .admission.keys import ApiKeys, reload_on_hangup
from .admission.watch import BodyPace
from .api.bodies import BodyParser, BodySpecs
from .api.openapi import openapi
from .edge import BootState, Edge, Phase
from .http.errors import EXCEPTION_HANDLERS
from .http.origin import HostPolicy, OriginCheck
from .observe.metrics import Metrics
from .observe.telemetry import Telemetry
from .routes import BODY_TYPES, ROUTES
from .site import BoxHeader, drain_on_sigterm
from .uploads.spool import UploadSpool

log = logging.getLogger("appliance.serve")

OpenServices = Callable[[Settings], AbstractAsyncContextManager[wiring.Services]]


def create_app(settings: Settings, open_services: OpenServices = wiring.open_services) -> Starlette:
    """`open_services` builds and closes the services (tests may pass their own)."""
    edge = _edge(settings)

    @contextlib.asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        try:
            async with contextlib.AsyncExitStack() as stack:  # closes the services once the server has drained
                stack.enter_context(reload_on_hangup(edge.gate.keys))
                if settings.cluster.boxes:
                    drain_on_sigterm(settings.cluster.drain_grace_s, lambda: setattr(app.state, "draining", True))
                task = asyncio.create_task(_boot(app, edge, stack, open_services))
                try:
                    yield
                finally:
                    app.state.boot = BootState(Phase.STOPPING)
                    task.cancel()  # a boot still under way stops where it is and closes what it opened
                    with contextlib.suppress(asyncio.CancelledError):
                        await task
        finally:
            gc.unfreeze()  # what the boot froze is collected again once the services are closed
            edge.parser.close()
            edge.telemetry.shutdown()

    # Admission first: a refusal for a foreign Host or Origin still gets a request id and a request-log line
    me = next((b for b in settings.cluster.members if b.name == settings.cluster.self), None)
    middleware = [Middleware(Admission, gate=edge.gate, routes=ROUTES),
                  Middleware(OriginCheck, policy=HostPolicy(settings.server, (_host(me.url),) if me else ()),
                             routes=ROUTES, on_reject=edge.metrics.rejected, body_types=BODY_TYPES)]
    if me is not None:  # outermost: every response says which box of the site answered, refusals included
        middleware.insert(0, Middleware(BoxHeader, name=me.name))
    app = Starlette(routes=ROUTES, lifespan=lifespan, exception_handlers=EXCEPTION_HANDLERS, middleware=middleware)
    app.state.edge = edge
    app.state.boot = BootState(Phase.STARTING)
    app.state.draining = False  # SIGTERM on a site's box: /readyz 503 while requests in progress finish
    return app


def _host(url: str) -> str:
    return urlsplit(url).hostname or ""


def server_options(settings: Settings) -> dict[str, Any]:
    """uvicorn's settings for this app (`appliance serve`, and the tests' live server, which mirrors it)."""
    s = settings.server
    trusted = [ip.strip() for ip in s.forwarded_allow_ips.split(",") if ip.strip()]
    # On SIGTERM uvicorn stops accepting, lets answers in progress finish for up to drain_timeout_s, then stops.
    # X-Forwarded-For is believed from the configured proxies only: uvicorn's default trusts 127.0.0.1, which
    # let any local client name its own address and so get a fresh open-mode bucket per request.
    return {"host": s.host, "port": s.port, "limit_concurrency": s.max_connections,
            "timeout_keep_alive": s.keep_alive_s, "timeout_graceful_shutdown": s.drain_timeout_s,
            "proxy_headers": bool(trusted), "forwarded_allow_ips": trusted or None,
            **({"ssl_certfile": s.tls_cert_file, "ssl_keyfile": s.tls_key_file} if s.tls_cert_file else {})}


def _edge(settings: Settings) -> Edge:
    metrics = Metrics()
    telemetry = Telemetry(settings.telemetry, metrics)
    a = settings.admission
    keys = ApiKeys.load(Path(a.keys_file)) if a.keys_file else None
    if keys is None:
        log.warning("no API keys file (admission.keys_file): requests name their tenant themselves")
    pace = BodyPace(settings.server.body_timeout_s, settings.server.body_min_bytes_per_s)
    gate = Gate(keys, TokenBuckets(a.rate_per_s, a.burst), a.max_in_flight, metrics.rejected, telemetry.finish,
                pace)
    metrics.set_gauge_source("appliance_in_flight_requests", "requests in progress", lambda: gate.in_flight)
    spool = UploadSpool(settings.spool_dir, settings.parse.spool_max_bytes, settings.parse.spool_tenant_share)
    metrics.set_gauge_source("appliance_upload_spool_bytes", "bytes reserved by uploads in progress",
                             lambda: spool.held)
    return Edge(settings, BodySpecs.from_settings(settings), openapi(settings), metrics, telemetry, gate,
                BodyParser(settings.server), spool)


async def _boot(app: Starlette, edge: Edge, stack: contextlib.AsyncExitStack, open_services: OpenServices) -> None:
    started = time.perf_counter()
    try:
        services = await stack.enter_async_context(open_services(edge.settings))
    except Exception as exc:  # keep serving /readyz so the failure is visible, not a dead port
        app.state.boot = BootState(Phase.FAILED, f"{type(exc).__name__}: {exc}")
        log.exception("boot failed")
        return
    await asyncio.to_thread(edge.spool.clear)  # the data folder is locked now: its spool is ours
    edge.metrics.attach_engines(services.engines.status)
    _parser_gauges(edge.metrics, services.files.parser_stats)
    services.engines.on_sample(edge.metrics.engine_sample)
    app.state.services = services
    # What the boot loaded lives as long as the process: keep it out of the collector's full passes, which walk
    # every object whenever requests leave enough survivors (bodies of 25,000 arrays: a ~100 ms pause every few)
    gc.freeze()
    app.state.boot = BootState(Phase.READY)
    log.info("serving on %s:%d (boot %.1f s)", edge.settings.server.host, edge.settings.server.port,
             time.perf_counter() - started)


def _parser_gauges(metrics: Metrics, stats: Callable[[], PoolStats]) -> None:
    """The parser workers, read at every scrape: how busy, and how often a file had to be stopped."""
    for name, help in (("workers", "parser worker processes"), ("busy", "parser workers parsing a file"),
                       ("waiting", "files waiting for a parser worker"), ("jobs", "files parsed, any outcome"),
                       ("timeouts", "files stopped past parse.timeout_s"),
                       ("out_of_memory", "files stopped past parse.max_memory_mib"),
                       ("crashes", "parser processes that died"), ("restarts", "parser workers replaced")):
        metrics.set_gauge_source(f"appliance_parser_{name}", help, lambda name=name: getattr(stats(), name))
