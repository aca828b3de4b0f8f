"""Reading a multipart upload (POST /v1/files) within its limits: the whole body, each file, the number of files
and the size of the other fields. The body is counted as it arrives, whatever Content-Length said; it is parsed in
linear time in bounded steps (multipart.py), and file parts go to the box's spool on disk as they come
(spool.py), so an upload costs memory only when a parse worker reads its file."""
from __future__ import annotations

import asyncio
import hashlib
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, BinaryIO

from starlette.requests import Request

from ...config import ParseSettings
from ..api.requests import ID_PATTERN
from ..api.validation import Spec, parse_json, validate
from ..http.errors import ApiError
from .multipart import MultipartError, MultipartReader, PartData, PartEnd, PartStart, boundary_of
from .spool import SpooledUpload

FIELDS = ("tenant", "partition", "kind", "language", "wait", "metadata")
MAX_FIELD_BYTES = 64 * 1024  # a non-file field (metadata is the big one)
MAX_METADATA_VALUES = 10_000
FLUSH_BYTES = 1 << 20  # file data goes to disk (in a worker thread) a MiB at a time
# What parsing one body's multipart framing may cost on the loop in all. The reader spends 0.2-0.6 ms per MiB whatever
# the bytes are, so this trips only on a body that finds a bug in it, never on a large upload.
PARSE_BUDGET_S = 2.0
FILE_NAME = Spec("string", "File name (the document id).", required=True, min=1, max=256, pattern=ID_PATTERN)


@dataclass(frozen=True, slots=True)
class UploadedFile:
    name: str
    path: Path  # in the spool, removed when the request ends
    size: int  # as sent; past parse.max_file_bytes only the first max_file_bytes + 1 are kept
    sha256: str  # of what was kept, hashed as it was written (the file is not read again for it)


@dataclass(frozen=True, slots=True)
class Upload:
    fields: dict[str, str]
    files: list[UploadedFile]

    def metadata(self) -> dict[str, Any] | None:
        raw = self.fields.get("metadata")
        if raw is None:
            return None
        try:  # the same checks as a JSON body: values counted and depth bounded before json.loads sees them
            value = parse_json(raw.encode("utf-8", "surrogatepass"), MAX_METADATA_VALUES)
        except ApiError as exc:
            raise ApiError.invalid(f"is not usable JSON: {exc.message}", "metadata") from None
        if not isinstance(value, dict):
            raise ApiError.invalid("must be a JSON object", "metadata")
        return value

    def wait(self) -> bool:
        raw = self.fields.get("wait", "true").strip().lower()
        if raw not in ("true", "false", "1", "0"):
            raise ApiError.invalid("must be true or false", "wait")
        return raw in ("true", "1")


async def read_upload(request: Request, limits: ParseSettings, spooled: SpooledUpload) -> Upload:
    """The body's fields and files (spooled in `spooled`, which the caller closes whatever happens)."""
    declared = request.headers.get("content-length")
    if declared is not None and declared.isdigit():
        if int(declared) > limits.max_upload_bytes:
            raise ApiError.too_large(limits.max_upload_bytes)
        spooled.reserve_declared(int(declared))
    try:
        reader = MultipartReader(boundary_of(request.headers.get("content-type", "")),
                                 limits.max_files_per_request + len(FIELDS))
    except MultipartError as exc:
        raise ApiError.bad_body(f"multipart body: {exc}", "invalid_multipart") from None
    form = _Form(limits, spooled)
    seen, spent = 0, 0.0
    try:
        async for chunk in request.stream():
            seen += len(chunk)
            if seen > limits.max_upload_bytes:
                raise ApiError.too_large(limits.max_upload_bytes)
            spooled.count(len(chunk))
            started = time.perf_counter()
            events = reader.feed(chunk)
            spent += time.perf_counter() - started
            if spent > PARSE_BUDGET_S:
                raise MultipartError(f"reading its framing took more than {PARSE_BUDGET_S} s")
            await form.take(events)
        reader.close()
    except MultipartError as exc:
        raise ApiError.bad_body(f"multipart body: {exc}", "invalid_multipart") from None
    finally:
        await form.close()
    return form.upload()


class _Form:
    """The parts as they come: fields kept (bounded), files written to the spool a MiB at a time."""

    def __init__(self, limits: ParseSettings, spooled: SpooledUpload):
        self.limits, self.spooled = limits, spooled
        self.fields: dict[str, str] = {}
        self.files: list[UploadedFile] = []
        self._part: PartStart | None = None
        self._pending: list[bytes] = []
        self._pending_bytes = 0
        self._size = 0  # of the current part, as sent
        self._digest = hashlib.sha256()
        self._out: BinaryIO | None = None
        self._path: Path | None = None

    async def take(self, events: list) -> None:
        for event in events:
            if isinstance(event, PartStart):
                self._start(event)
            elif isinstance(event, PartData):
                await self._data(event.data)
            elif isinstance(event, PartEnd):
                await self._end()

    def upload(self) -> Upload:
        if not self.files:
            raise ApiError.invalid("at least one 'file' part is required", "file")
        return Upload(self.fields, self.files)

    async def close(self) -> None:
        if self._out is not None:
            await asyncio.to_thread(self._out.close)
            self._out = None

    def _start(self, part: PartStart) -> None:
        name = part.name[:40]
        if part.filename is not None:
            if part.name != "file":
                raise ApiError.invalid(f"a file part must be named 'file', not {name!r}", name)
            validate(part.filename, FILE_NAME, "file")
            if len(self.files) >= self.limits.max_files_per_request:
                raise ApiError.bad_body(f"multipart body: more than {self.limits.max_files_per_request} files",
                                        "invalid_multipart")
            self._path, self._out = self.spooled.new_file()
            self._digest = hashlib.sha256()
        elif part.name not in FIELDS:
            raise ApiError.invalid(f"unknown field; expected 'file' parts and {', '.join(FIELDS)}", name)
        elif part.name in self.fields:
            raise ApiError.invalid("is given twice", name)
        self._part, self._size, self._pending, self._pending_bytes = part, 0, [], 0

    async def _data(self, data: bytes) -> None:
        self._size += len(data)
        if self._out is None:
            if self._size > MAX_FIELD_BYTES:
                raise ApiError.bad_body(f"multipart body: the field {self._part.name[:40]!r} is larger than "
                                        f"{MAX_FIELD_BYTES} bytes", "invalid_multipart")
            self._pending.append(data)
            return
        kept = self.limits.max_file_bytes + 1 - (self._size - len(data))  # past the limit: refused for this file
        if kept > 0:
            chunk = data[:kept]
            self._pending.append(chunk)
            self._pending_bytes += len(chunk)
            if self._pending_bytes >= FLUSH_BYTES:
                await self._flush()

    async def _end(self) -> None:
        part = self._part
        if self._out is None:
            try:
                self.fields[part.name] = b"".join(self._pending).decode("utf-8")
            except UnicodeDecodeError:
                raise ApiError.invalid("is not UTF-8", part.name) from None
        else:
            await self._flush()
            await self.close()
            self.files.append(UploadedFile(part.filename, self._path, self._size, self._digest.hexdigest()))
        self._part, self._pending, self._pending_bytes = None, [], 0

    async def _flush(self) -> None:
        if self._pending:
            batch, self._pending, self._pending_bytes = b"".join(self._pending), [], 0
            await asyncio.to_thread(self._write, batch)

    def _write(self, batch: bytes) -> None:
        self._out.write(batch)
        self._digest.update(batch)
