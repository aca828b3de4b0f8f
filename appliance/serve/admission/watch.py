"""What one client's connection may cost while its request holds a slot: a deadline on sending the body, and the
end of the work it asked for once it has gone.

uvicorn has no body-read timeout, so a client that trickles its body would hold its slot for as long as it likes;
and a non-streamed answer would run to its end for no one, its engine request included. `ClientWatch` wraps the
request's `receive`: while the body comes, each read has a deadline of `timeout_s` plus the time the bytes so far
need at `min_bytes_per_s` (a large upload at a fair rate is fine, a trickle is not); once the body is read it
keeps listening for `http.disconnect` and calls `on_gone`, which cancels the request's work.
"""
from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from dataclasses import dataclass

from starlette.types import Message, Receive


@dataclass(frozen=True, slots=True)
class BodyPace:
    timeout_s: float = 10.0  # any body may take this long
    min_bytes_per_s: float = 65536.0  # and this much longer per byte received


class BodyTimeout(Exception):
    """The client sent its body too slowly; the request ends with 408."""


class ClientWatch:
    def __init__(self, receive: Receive, pace: BodyPace, on_gone: Callable[[], object]):
        self._receive, self._pace, self._on_gone = receive, pace, on_gone
        self._started = time.monotonic()
        self._received = 0
        self._listener: asyncio.Task | None = None
        self.gone = asyncio.Event()  # the client disconnected (or the response is complete)
        self.responded = False  # the whole response was sent: nothing left to cancel

    async def receive(self) -> Message:
        if self._listener is not None:  # the body is read: only a disconnect can come, and the listener reads it
            await self.gone.wait()
            return {"type": "http.disconnect"}
        left = self._started + self._pace.timeout_s + self._received / self._pace.min_bytes_per_s - time.monotonic()
        try:
            async with asyncio.timeout(max(left, 0.0)):
                message = await self._receive()
        except TimeoutError:
            raise BodyTimeout(f"body not received within {self._pace.timeout_s:g} s "
                              f"(+1 s per {self._pace.min_bytes_per_s:g} bytes)") from None
        if message["type"] == "http.disconnect":
            self.gone.set()
        elif not message.get("more_body", False):
            self._listener = asyncio.create_task(self._listen())
        else:
            self._received += len(message.get("body", b""))
        return message

    async def _listen(self) -> None:
        await self._receive()  # after the body, the server sends only http.disconnect (or it when the reply is done)
        self.gone.set()
        if not self.responded:
            self._on_gone()

    def close(self) -> None:
        if self._listener is not None:
            self._listener.cancel()
