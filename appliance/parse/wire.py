"""The pool's side of the socket to a worker: one frame out (the input's raw bytes), one pickled frame back.

A reply's length comes from the worker, where hostile bytes meet C parsers: it is checked against a bound before
anything is allocated, so a garbled or hostile header (2**63 bytes) is one file's error, not the server's memory.
"""
from __future__ import annotations

import asyncio
import socket

from .document import ParseLimits
from .worker import HEADER, load_reply


class Died(Exception):
    """The worker's end of the socket closed: the process is gone."""


class ReplyTooLarge(Exception):
    """The worker announced a reply over the bound; its socket still holds the reply, so the worker is retired."""

    def __init__(self, size: int, limit: int):
        super().__init__(f"the parser's reply of {size:,} bytes is over the limit of {limit:,} bytes")


def reply_limit(limits: ParseLimits) -> int:
    """The most a reply may take: twice the text a file may hold (`max_chars`, checked in the worker) at 4 bytes a
    character (UTF-8 in pickle), room for titles and section paths, plus pickle's own bytes."""
    return 8 * limits.max_chars + (16 << 20)


async def send(sock: socket.socket, data: bytes) -> None:
    loop = asyncio.get_running_loop()
    if len(data) < 65536:  # one syscall for small inputs; large ones go from the caller's buffer, uncopied
        await loop.sock_sendall(sock, HEADER.pack(len(data)) + data)
    else:
        await loop.sock_sendall(sock, HEADER.pack(len(data)))
        await loop.sock_sendall(sock, data)


async def receive(sock: socket.socket, limit: int) -> tuple:
    """One reply, unpickled; ReplyTooLarge where its header says more than `limit` bytes."""
    (size,) = HEADER.unpack(await _recv_exactly(sock, HEADER.size))
    if size > limit:
        raise ReplyTooLarge(size, limit)
    return load_reply(await _recv_exactly(sock, size))


async def _recv_exactly(sock: socket.socket, size: int) -> bytearray:
    loop = asyncio.get_running_loop()
    buf = bytearray(size)
    view, got = memoryview(buf), 0
    while got < size:
        n = await loop.sock_recv_into(sock, view[got:])
        if n == 0:
            raise Died()
        got += n
    return buf
