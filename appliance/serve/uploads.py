"""Reading a multipart upload (POST /v1/files) within its limits: the whole body, each file, the number of files
and the size of the other fields. The body is counted as it arrives, whatever Content-Length said; file parts are
spooled to disk past 1 MB by Starlette's parser, so an upload costs memory only once it is read for parsing."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from starlette.datastructures import UploadFile
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.types import Message

from ..config import ParseSettings
from .errors import ApiError
from .body_schemas import ID_PATTERN
from .validation import Spec, parse_json, validate

FIELDS = ("tenant", "partition", "kind", "language", "wait", "metadata")
MAX_FIELD_BYTES = 64 * 1024  # a non-file field (metadata is the big one)
MAX_METADATA_VALUES = 10_000
FILE_NAME = Spec("string", "File name (the document id).", required=True, min=1, max=256, pattern=ID_PATTERN)


@dataclass(frozen=True, slots=True)
class UploadedFile:
    name: str
    data: bytes


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


async def read_upload(request: Request, limits: ParseSettings) -> Upload:
    declared = request.headers.get("content-length")
    if declared is not None and declared.isdigit() and int(declared) > limits.max_upload_bytes:
        raise ApiError.too_large(limits.max_upload_bytes)
    counted = Request(request.scope, _counting(request.receive, limits.max_upload_bytes))
    try:
        form = await counted.form(max_files=limits.max_files_per_request, max_fields=len(FIELDS),
                                  max_part_size=MAX_FIELD_BYTES)
    except HTTPException as exc:  # the multipart parser's own refusals: malformed, too many parts, a big field
        raise ApiError.bad_body(f"multipart body: {exc.detail}", "invalid_multipart") from None
    try:
        return await _collect(form, limits)
    finally:
        await form.close()


async def _collect(form, limits: ParseSettings) -> Upload:
    fields: dict[str, str] = {}
    files: list[UploadedFile] = []
    for name, value in form.multi_items():
        if isinstance(value, UploadFile):
            if name != "file":
                raise ApiError.invalid(f"a file part must be named 'file', not {name[:40]!r}", name[:40])
            file_name = validate(value.filename or "", FILE_NAME, "file")
            data = await value.read(limits.max_file_bytes + 1)  # past the limit: refused for this file only
            files.append(UploadedFile(file_name, data))
        elif name in FIELDS:
            if name in fields:
                raise ApiError.invalid("is given twice", name)
            fields[name] = value
        else:
            raise ApiError.invalid(f"unknown field; expected 'file' parts and {', '.join(FIELDS)}", name[:40])
    if not files:
        raise ApiError.invalid("at least one 'file' part is required", "file")
    return Upload(fields, files)


def _counting(receive, limit: int):
    seen = 0

    async def counted() -> Message:
        nonlocal seen
        message = await receive()
        seen += len(message.get("body", b""))
        if seen > limit:
            raise ApiError.too_large(limit)
        return message
    return counted
