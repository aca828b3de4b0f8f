"""A streaming multipart/form-data reader whose cost is linear in the body, whatever the body holds.

Starlette's `request.form()` runs python-multipart on the event loop, which falls back to byte-at-a-time work
when file data repeats the boundary followed by a wrong byte: ~9-25 ms per 64 KiB chunk of such data, so a few MB/s
of it stalled every tenant. Here each chunk is searched for the delimiter with `bytes.find` (C, one pass), part
headers and the preamble are bounded, and the caller gets each part's data as it comes: nothing is kept but the
tail that may begin a delimiter (RFC 7578 / RFC 2046 section 5.1.1).
"""
from __future__ import annotations

from dataclasses import dataclass
from enum import Enum, auto
from urllib.parse import unquote

MAX_HEADER_BYTES = 16 * 1024  # one part's header block
MAX_PREAMBLE_BYTES = 64 * 1024  # what a body may carry before its first delimiter
_PADDING = 256  # spaces after a delimiter, before its CRLF ("transport padding")


class MultipartError(ValueError):
    """The body is not multipart/form-data as declared (the request ends with 400)."""


@dataclass(frozen=True, slots=True)
class PartStart:
    name: str
    filename: str | None  # None: a form field, not a file
    content_type: str


@dataclass(frozen=True, slots=True)
class PartData:
    data: bytes


@dataclass(frozen=True, slots=True)
class PartEnd:
    pass


Event = PartStart | PartData | PartEnd


class _State(Enum):
    PREAMBLE = auto()
    DELIMITER_LINE = auto()
    HEADERS = auto()
    BODY = auto()
    DONE = auto()


def boundary_of(content_type: str) -> bytes:
    """The boundary a `multipart/form-data; boundary=...` header names (1-70 characters, RFC 2046)."""
    kind, params = parse_header_params(content_type)
    boundary = params.get("boundary", "")
    if kind != "multipart/form-data" or not 1 <= len(boundary) <= 70 or not boundary.isascii() \
            or boundary.endswith(" "):
        raise MultipartError("Content-Type must be multipart/form-data with a boundary of 1-70 ASCII characters")
    return boundary.encode("ascii")


class MultipartReader:
    """`feed(chunk)` returns the events the chunk completes; `close()` checks the body ended with its delimiter."""

    def __init__(self, boundary: bytes, max_parts: int):
        self._delimiter = b"\r\n--" + boundary
        self._buffer = bytearray(b"\r\n")  # the first delimiter has no CRLF of its own before it
        self._state = _State.PREAMBLE
        self._scanned = 0  # bytes of the buffer known not to hold what the state looks for
        self._seen = 0
        self._parts, self._max_parts = 0, max_parts

    def feed(self, chunk: bytes) -> list[Event]:
        self._buffer += chunk
        self._seen += len(chunk)
        events: list[Event] = []
        while self._step(events):
            pass
        return events

    def close(self) -> None:
        if self._state is not _State.DONE:
            raise MultipartError("the body ended before its closing delimiter")

    def _step(self, events: list[Event]) -> bool:
        """One move of the state machine; False when it needs more bytes."""
        state = self._state
        if state is _State.PREAMBLE or state is _State.BODY:
            return self._to_delimiter(events)
        if state is _State.DELIMITER_LINE:
            return self._delimiter_line()
        if state is _State.HEADERS:
            return self._headers(events)
        self._buffer.clear()  # the epilogue is ignored
        return False

    def _to_delimiter(self, events: list[Event]) -> bool:
        buf, in_body = self._buffer, self._state is _State.BODY
        at = buf.find(self._delimiter, self._scanned)
        if at < 0:
            cut = len(buf) - (len(self._delimiter) - 1)  # the rest may begin a delimiter
            if cut > 0:
                if in_body:
                    events.append(PartData(bytes(buf[:cut])))
                del buf[:cut]
            if not in_body and self._seen > MAX_PREAMBLE_BYTES:
                raise MultipartError(f"no boundary in the body's first {MAX_PREAMBLE_BYTES} bytes")
            self._scanned = 0
            return False
        if in_body:
            if at:
                events.append(PartData(bytes(buf[:at])))
            events.append(PartEnd())
        del buf[:at + len(self._delimiter)]
        self._state, self._scanned = _State.DELIMITER_LINE, 0
        return True

    def _delimiter_line(self) -> bool:
        buf = self._buffer
        if buf[:2] == b"--":
            self._state = _State.DONE
            return True
        if buf == b"-":
            return False
        end = buf.find(b"\r\n")
        line = bytes(buf[:end] if end >= 0 else buf[:_PADDING + 1])
        if line.rstrip(b"\r").strip(b" \t"):
            raise MultipartError("a delimiter is followed by other bytes than CRLF")
        if end < 0:
            if len(buf) > _PADDING:
                raise MultipartError("a delimiter is not followed by CRLF")
            return False
        del buf[:end + 2]
        self._state = _State.HEADERS
        return True

    def _headers(self, events: list[Event]) -> bool:
        buf = self._buffer
        if buf[:2] == b"\r\n":
            raise MultipartError("a part has no Content-Disposition header")
        end = buf.find(b"\r\n\r\n", max(0, self._scanned - 3))
        if end > MAX_HEADER_BYTES or (end < 0 and len(buf) > MAX_HEADER_BYTES):
            raise MultipartError(f"a part's headers are longer than {MAX_HEADER_BYTES} bytes")
        if end < 0:
            self._scanned = len(buf)
            return False
        self._parts += 1
        if self._parts > self._max_parts:
            raise MultipartError(f"more than {self._max_parts} parts")
        events.append(_part_start(bytes(buf[:end])))
        del buf[:end + 4]
        self._state, self._scanned = _State.BODY, 0
        return True


def _part_start(raw: bytes) -> PartStart:
    try:
        text = raw.decode("utf-8")  # browsers send file names as UTF-8, unescaped
    except UnicodeDecodeError:
        raise MultipartError("a part's headers are not UTF-8") from None
    headers: dict[str, str] = {}
    for line in text.split("\r\n"):
        name, colon, value = line.partition(":")
        if not colon or not name.strip():
            raise MultipartError(f"a part's header line is not 'Name: value': {line[:60]!r}")
        headers[name.strip().lower()] = value.strip()
    disposition = headers.get("content-disposition")
    if disposition is None:
        raise MultipartError("a part has no Content-Disposition header")
    kind, params = parse_header_params(disposition)
    if kind != "form-data" or "name" not in params:
        raise MultipartError("a part's Content-Disposition must be form-data with a name")
    filename = params.get("filename*") or params.get("filename")
    return PartStart(params["name"], filename, headers.get("content-type", ""))


def parse_header_params(value: str) -> tuple[str, dict[str, str]]:
    """`type; a=1; b="two \\"quoted\\""` -> ("type", {"a": "1", "b": 'two "quoted"'}), names lower-cased; an
    RFC 5987 `name*=UTF-8''%E2%82%AC` value is decoded."""
    kind, _, rest = value.partition(";")
    params: dict[str, str] = {}
    i, n = 0, len(rest)
    while i < n:
        eq, semi = rest.find("=", i), rest.find(";", i)
        if eq < 0:
            break
        if 0 <= semi < eq:  # a parameter without a value: skipped
            i = semi + 1
            continue
        name = rest[i:eq].strip().lower()
        i = eq + 1
        while i < n and rest[i] in " \t":
            i += 1
        if i < n and rest[i] == '"':
            item, i = _quoted(rest, i + 1)
        else:
            end = rest.find(";", i)
            end = n if end < 0 else end
            item, i = rest[i:end].strip(), end
        params.setdefault(name, _extended(item) if name.endswith("*") else item)
        semi = rest.find(";", i)
        i = n if semi < 0 else semi + 1
    return kind.strip().lower(), params


def _quoted(text: str, i: int) -> tuple[str, int]:
    """A quoted string from just past its opening quote: its value and the index past its closing quote. Only
    `\\"` and `\\\\` are escapes: browsers send a Windows path's backslashes as they are."""
    out = []
    n = len(text)
    while i < n:
        char = text[i]
        if char == "\\" and i + 1 < n and text[i + 1] in '"\\':
            out.append(text[i + 1])
            i += 2
        elif char == '"':
            return "".join(out), i + 1
        else:
            out.append(char)
            i += 1
    raise MultipartError("a quoted header parameter is not closed")


def _extended(value: str) -> str:
    charset, _, rest = value.partition("'")
    _, _, encoded = rest.partition("'")
    try:
        return unquote(encoded, encoding=charset or "utf-8", errors="strict")
    except (LookupError, UnicodeDecodeError):
        raise MultipartError(f"a header parameter's encoding cannot be read: {value[:60]!r}") from None
