"""The uploading attacker (issue 35): multipart bodies that made the old reader work byte by byte on the event loop,
files that drove the parsers' regexes super-linear, floods of files to parse, and uploads that announce the
largest body allowed and then trickle it, holding their share of the spool. The normal app uploads a small file
now and then, measured like its searches."""
from __future__ import annotations

import asyncio
import time

import httpx

from .attack import _every, trickle
from .stats import Recorder

BOUNDARY = b"soakboundary"
SPOOL_HOLDERS = 12  # each announces parse.max_upload_bytes (256 MiB): 8 fill the tenant's half of the 4 GiB spool
MAX_UPLOAD = 256 * 1024 * 1024


def multipart(files: list[tuple[str, bytes]], partition: str) -> tuple[bytes, dict]:
    parts = [b"--" + BOUNDARY + b'\r\nContent-Disposition: form-data; name="partition"\r\n\r\n'
             + partition.encode() + b"\r\n"]
    parts += [b"--" + BOUNDARY + b'\r\nContent-Disposition: form-data; name="file"; filename="' + name.encode()
              + b'"\r\n\r\n' + data + b"\r\n" for name, data in files]
    body = b"".join(parts) + b"--" + BOUNDARY + b"--\r\n"
    return body, {"content-type": "multipart/form-data; boundary=" + BOUNDARY.decode()}


def _boundary_body() -> tuple[bytes, dict]:
    return multipart([("x.txt", (b"\r\n--" + BOUNDARY + b"!") * (2 * 1024 * 1024 // 17))], "junk")


def _regex_bombs() -> tuple[bytes, dict]:
    """An HTML page of ~120 KB of `<a` (the nesting check's pattern) and a text file of 64 KiB of `[` (format
    detection's link pattern): each cost the old parsers more than 15 s (issue 35, item 3)."""
    html = b"<html><body>" + b"<a" * 60_000 + b"</body></html>"
    return multipart([("bomb.html", html), ("brackets.txt", b"[" * 65536)], "junk")


def _file_flood(n: int) -> tuple[bytes, dict]:
    text = b"Valve maintenance log. " * 4000  # ~92 KB of text to parse, chunk and encode
    return multipart([(f"flood-{n}-{i}.txt", text + str(i).encode()) for i in range(20)], "flood")


def upload_attacks(server, rec: Recorder, until: float) -> list:
    boundary, bombs = _boundary_body(), _regex_bombs()
    counter = iter(range(10**9))
    return [_every(1.0, until, lambda c: c.post("/v1/files", content=boundary[0], headers=boundary[1]), server, rec,
                   "upload_boundary"),
            _every(2.0, until, lambda c: c.post("/v1/files", content=bombs[0], headers=bombs[1], timeout=180),
                   server, rec, "upload_regex_bombs"),
            _every(2.0, until, lambda c: _flood_post(c, next(counter)), server, rec, "upload_flood"),
            *(_hold_spool(server.port, server.keys["attacker"], rec, until) for _ in range(SPOOL_HOLDERS))]


def _flood_post(client: httpx.AsyncClient, n: int):
    body, headers = _file_flood(n)
    return client.post("/v1/files", content=body, headers=headers, timeout=300)


async def _hold_spool(port: int, key: str, rec: Recorder, until: float) -> None:
    """Announce the largest body allowed, then send it slowly: the spool reserves it until the body deadline."""
    head = (f"POST /v1/files HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: Bearer {key}\r\n"
            f"Content-Type: multipart/form-data; boundary={BOUNDARY.decode()}\r\n"
            f"Content-Length: {MAX_UPLOAD}\r\n\r\n").encode()
    head += b"--" + BOUNDARY + b'\r\nContent-Disposition: form-data; name="file"; filename="h.txt"\r\n\r\n'
    await trickle(port, head, b"x" * 1024, rec, until, "attack:upload_spool_hold")


async def normal_uploader(client: httpx.AsyncClient, rec: Recorder, until: float) -> None:
    """The app's own upload every 5 s: one small Markdown file, waiting until it is searchable."""
    n = 0
    while time.monotonic() < until:
        n += 1
        body, headers = multipart([(f"note-{n}.md", f"# Note {n}\n\nPump {n} restarts at night.\n".encode())],
                                  "notes")
        await rec.timed("upload", client.post("/v1/files", content=body, headers=headers, timeout=120))
        await asyncio.sleep(5.0)

