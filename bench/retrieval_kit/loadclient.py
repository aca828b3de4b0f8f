"""A minimal HTTP/1.1 keep-alive client for loopback load tests.

On a 2-core box the load generator shares the cores with the server, so its own cost is part of what gets
measured: httpx spends several ms of CPU per request, which capped even GET /healthz at ~100-150 requests/s here.
This client only writes a request and reads the reply on a kept-alive connection (one per concurrent client).
"""
from __future__ import annotations

import asyncio
import json


class Connection:
    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, host: str):
        self.reader, self.writer, self.host = reader, writer, host

    async def request(self, method: str, path: str, payload: dict | None = None) -> tuple[int, bytes]:
        body = json.dumps(payload).encode() if payload is not None else b""
        head = (f"{method} {path} HTTP/1.1\r\nHost: {self.host}\r\nContent-Type: application/json\r\n"
                f"Content-Length: {len(body)}\r\n\r\n")
        self.writer.write(head.encode("latin-1") + body)
        status = int((await self.reader.readline()).split()[1])
        length, chunked = 0, False
        while (line := await self.reader.readline()) not in (b"\r\n", b""):
            name, _, value = line.decode("latin-1").partition(":")
            name = name.strip().lower()
            if name == "content-length":
                length = int(value)
            elif name == "transfer-encoding" and "chunked" in value.lower():
                chunked = True
        return status, await (self._chunked() if chunked else self.reader.readexactly(length))

    async def _chunked(self) -> bytes:
        parts = []
        while size := int((await self.reader.readline()).split(b";")[0], 16):
            parts.append(await self.reader.readexactly(size))
            await self.reader.readline()
        await self.reader.readline()  # the blank line after the last chunk
        return b"".join(parts)

    def close(self) -> None:
        self.writer.close()


class Pool:
    """`size` open connections; a request borrows one, so `size` concurrent callers never wait for a socket."""

    def __init__(self, host: str, port: int, size: int):
        self.host, self.port, self.size = host, port, size
        self._idle: asyncio.Queue[Connection] = asyncio.Queue()

    async def __aenter__(self) -> "Pool":
        for _ in range(self.size):
            reader, writer = await asyncio.open_connection(self.host, self.port)
            self._idle.put_nowait(Connection(reader, writer, f"{self.host}:{self.port}"))
        return self

    async def __aexit__(self, *exc) -> None:
        while not self._idle.empty():
            self._idle.get_nowait().close()

    async def request(self, method: str, path: str, payload: dict | None = None) -> bytes:
        conn = await self._idle.get()
        try:
            status, body = await conn.request(method, path, payload)
        except BaseException:
            conn.close()  # a broken connection is not returned; open a fresh one in its place
            reader, writer = await asyncio.open_connection(self.host, self.port)
            self._idle.put_nowait(Connection(reader, writer, conn.host))
            raise
        self._idle.put_nowait(conn)
        if status != 200:
            raise RuntimeError(f"{method} {path} answered {status}: {body[:200]!r}")
        return body
