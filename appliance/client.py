"""A small client for the appliance's HTTP API: JSON calls, the native Server-Sent Events stream, the API key.

The CLI's one way to talk to a running server. Errors are typed, so callers need not know the HTTP library:
`ServerError` when the server answers with an error status, `ServerUnreachable` when nothing answers.
"""
from __future__ import annotations

import json
import ssl
from collections.abc import Iterator
from typing import Any

import httpx


def base_url(host: str, port: int, tls: bool = False) -> str:
    """The URL a local client reaches a server bound to `host`:`port` at: one bound to every interface is reached
    on loopback ("0.0.0.0" is no host name it answers to); https when the server serves TLS itself."""
    host = {"0.0.0.0": "127.0.0.1", "::": "[::1]", "": "127.0.0.1"}.get(host, host)
    return f"{'https' if tls else 'http'}://{host}:{port}"


def local_tls(ca_file: str = "") -> ssl.SSLContext:
    """How the box's own CLI checks its TLS server: the certificate must chain to the site's CA (`ca_file`, else
    the system's), but it names the box, not the loopback address the CLI dials, so the name is not compared."""
    context = ssl.create_default_context(cafile=ca_file or None)
    context.check_hostname = False
    return context


class ServerError(Exception):
    """The server answered with an error status."""

    def __init__(self, status: int, body: str):
        super().__init__(f"server answered {status}: {body}")
        self.status, self.body = status, body


class ServerUnreachable(ConnectionError):
    """Nothing answered at the address (or the connection broke)."""


class ApplianceClient:
    def __init__(self, base_url: str, api_key: str | None = None, timeout: float = 600.0,
                 verify: ssl.SSLContext | bool = True):
        headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
        self.base_url = base_url.rstrip("/")
        self._http = httpx.Client(base_url=self.base_url, headers=headers, timeout=timeout, verify=verify)

    def __enter__(self) -> ApplianceClient:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def close(self) -> None:
        self._http.close()

    def get(self, path: str, params: dict[str, Any] | None = None) -> Any:
        return self._json("GET", path, params=params)

    def post(self, path: str, body: dict[str, Any]) -> Any:
        return self._json("POST", path, json=body)

    def upload(self, path: str, fields: dict[str, str], files: list[tuple[str, bytes]]) -> Any:
        """POST a multipart body: `fields` and one `file` part per (name, bytes). A reply that answers per file
        (every file refused, say) is returned as it is, not raised."""
        parts = [("file", (name, data, "application/octet-stream")) for name, data in files]
        try:
            reply = self._http.post(path, data=fields, files=parts)
        except httpx.TransportError as exc:
            raise ServerUnreachable(f"cannot reach {self.base_url}: {exc}") from exc
        if reply.is_error and "files" in _json_or_empty(reply):
            return reply.json()
        _check(reply)
        return reply.json()

    def delete(self, path: str, params: dict[str, Any] | None = None) -> Any:
        return self._json("DELETE", path, params=params)

    def is_up(self) -> bool:
        """True when the server is ready, False when nothing answers. A server that answers but is not ready
        raises `ServerError`: it is there (and holds its data folder), just not serving yet."""
        try:
            reply = self._http.get("/readyz", timeout=1)
        except httpx.TransportError:
            return False
        _check(reply)
        return True

    def stream_sse(self, path: str, body: dict[str, Any]) -> Iterator[tuple[str, Any]]:
        """POST `body` and yield (event, data) per Server-Sent Event as it arrives; data is parsed JSON."""
        try:
            with self._http.stream("POST", path, json=body) as reply:
                if reply.is_error:
                    reply.read()
                    _check(reply)
                yield from _events(reply.iter_lines())
        except httpx.TransportError as exc:
            raise ServerUnreachable(f"{self.base_url}: {exc}") from exc

    def _json(self, method: str, path: str, **kwargs) -> Any:
        try:
            reply = self._http.request(method, path, **kwargs)
        except httpx.TransportError as exc:
            raise ServerUnreachable(f"cannot reach {self.base_url}: {exc}") from exc
        _check(reply)
        return reply.json()


def _json_or_empty(reply: httpx.Response) -> dict:
    try:
        body = reply.json()
    except ValueError:
        return {}
    return body if isinstance(body, dict) else {}


def _check(reply: httpx.Response) -> None:
    if reply.is_error:
        raise ServerError(reply.status_code, reply.text)


def _events(lines: Iterator[str]) -> Iterator[tuple[str, Any]]:
    """The SSE wire format: `event:` and `data:` lines, an event ends at a blank line; comments start with ':'."""
    event, data = "message", []
    for line in lines:
        if not line:
            if data:
                yield event, json.loads("\n".join(data))
            event, data = "message", []
        elif line.startswith("event:"):
            event = line[6:].strip()
        elif line.startswith("data:"):
            data.append(line[5:].removeprefix(" "))
    if data:
        yield event, json.loads("\n".join(data))
