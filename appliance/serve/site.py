"""What a box on a site of several needs at the HTTP edge: saying which box answered, and draining on SIGTERM
so the balancer moves new requests away before the server stops taking them."""
from __future__ import annotations

import asyncio
import logging
import signal
from collections.abc import Callable

from starlette.types import ASGIApp, Message, Receive, Scope, Send

log = logging.getLogger("appliance.serve")


class BoxHeader:
    """ASGI middleware: `X-Appliance-Box: <name>` on every response."""

    def __init__(self, app: ASGIApp, name: str):
        self.app, self.header = app, (b"x-appliance-box", name.encode())

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return

        async def send_named(message: Message) -> None:
            if message["type"] == "http.response.start":
                message["headers"] = [*message.get("headers", []), self.header]
            await send(message)

        await self.app(scope, receive, send_named)


def drain_on_sigterm(grace_s: float, on_drain: Callable[[], None]) -> bool:
    """From the server's main thread: on SIGTERM call `on_drain` (so /readyz says 503) and hand the signal to
    uvicorn's own handler `grace_s` later, which then stops taking connections and lets answers in progress end
    (server.drain_timeout_s). A second SIGTERM starts that at once, without the rest of the grace. False where signals cannot be caught here (a server
    run in another thread, as the tests' in-process one is)."""
    previous = signal.getsignal(signal.SIGTERM)
    if not callable(previous):
        return False
    loop = asyncio.get_running_loop()
    draining = False

    def on_term(signum, frame) -> None:
        nonlocal draining
        if draining:
            previous(signum, frame)
            return
        draining = True
        on_drain()
        log.info("SIGTERM: /readyz answers 503 for %.1f s, then the server stops taking requests", grace_s)
        loop.call_soon_threadsafe(loop.call_later, grace_s, previous, signum, frame)

    try:
        signal.signal(signal.SIGTERM, on_term)
    except ValueError:  # not the main thread
        return False
    return True
