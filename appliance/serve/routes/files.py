"""POST /v1/files (multipart: files parsed, chunked with their pages and sections, stored and indexed; one
answer per file) and GET /v1/documents/{id}/file (a document's original file)."""
from __future__ import annotations

import asyncio
import os
from typing import TYPE_CHECKING
from urllib.parse import quote

from starlette.requests import Request
from starlette.responses import FileResponse, JSONResponse, Response
from starlette.routing import Route

from ...library import FileInput, KindConflict, LanguageConflict, QuotaExceeded
from ...parse import MEDIA_TYPES, Format, ParseErrorCode
from ..api.requests import DOCUMENT_ID, LANGUAGE_CHOICES
from ..api.validation import validate
from ..edge import NAME, copies_json, edge, name_param, require_ready, tenant_of, tenant_param
from ..http.errors import ApiError
from ..http.responses import files_json
from ..uploads.reader import read_upload
from ..uploads.spool import SpooledUpload

if TYPE_CHECKING:
    from ...wiring import Services

SUPPORTED = ["PDF (scanned pages read by OCR)", "DOCX", "PPTX", "HTML", "Markdown", "plain text (UTF-8, UTF-16, "
             "GB18030, Big5 and other common encodings)", "PNG, JPEG and TIFF images (read by OCR)"]
# A request whose every file failed answers with the failure's status: 415 for formats not supported, 413 for
# files past a limit, 409 for an id given twice; 422 for a file that could not be read (or for mixed reasons).
_STATUS = {ParseErrorCode.UNSUPPORTED: 415, ParseErrorCode.TOO_LARGE: 413, "duplicate_id": 409}


async def post_files(request: Request) -> JSONResponse:
    services = require_ready(request)
    # a keyed request's tenant is known before its body: its share of the spool is checked as the bytes come
    spooled = edge(request).spool.open(request.state.tenant)
    try:
        return await _store_upload(request, services, spooled)
    finally:
        await asyncio.shield(asyncio.to_thread(spooled.close))  # a cancelled request's files go too


async def _store_upload(request: Request, services: Services, spooled: SpooledUpload) -> JSONResponse:
    settings = edge(request).settings
    upload = await read_upload(request, settings.parse, spooled)
    tenant = tenant_of(request, upload.fields.get("tenant"))
    partition = validate(upload.fields.get("partition"), NAME, "partition")
    kind = upload.fields.get("kind")
    if kind is not None:
        validate(kind, NAME, "kind")
    language = upload.fields.get("language")
    if language is not None and language not in LANGUAGE_CHOICES:
        raise ApiError.invalid(f"language must be one of {list(LANGUAGE_CHOICES)}", "language")
    metadata = upload.metadata()
    files = [FileInput(f.name, f.path, metadata=metadata, sha256_known=f.sha256) for f in upload.files]
    try:
        # once stored, the files are the blob store's (linked): the spool's bytes go before the index wait
        result = await services.files.ingest(tenant, partition, files, kind, upload.wait(),
                                             settings.server.ingest_wait_timeout_s, language=language,
                                             on_stored=spooled.release)
    except KindConflict as exc:
        raise ApiError.conflict("kind_conflict", str(exc), "kind") from None
    except LanguageConflict as exc:
        raise ApiError.conflict("language_conflict", str(exc), "language") from None
    except QuotaExceeded as exc:
        raise ApiError.quota_exceeded(str(exc), exc.field) from None
    body = files_json(result)
    if not result.stored:
        codes = {str(f.error.code) for f in result.files if f.error is not None}
        status = _STATUS.get(next(iter(codes)), 422) if len(codes) == 1 else 422
        body["error"] = {"code": codes.pop() if len(codes) == 1 else "files_rejected",
                         "message": "no file was stored: " + "; ".join(
                             f"{f.name}: {f.error.message}" for f in result.files if f.error is not None)[:2000]}
        if status == 415:
            body["supported"] = SUPPORTED
        return JSONResponse(body, status_code=status)
    body |= await copies_json(request, tenant, result.seq)
    # 202 as for POST /v1/documents: stored, but not searchable yet
    return JSONResponse(body, status_code=200 if result.indexed else 202)


# A download is named for the format its bytes were read as, never for the name its uploader chose (.hta, .exe)
EXTENSIONS = {Format.PDF: ".pdf", Format.DOCX: ".docx", Format.PPTX: ".pptx", Format.HTML: ".html",
              Format.MARKDOWN: ".md", Format.TEXT: ".txt", Format.PNG: ".png", Format.JPEG: ".jpg",
              Format.TIFF: ".tiff"}


def _format_of(value: str) -> Format | None:
    try:
        return Format(value)
    except ValueError:  # a format a newer box stored (replicated here): served as bytes
        return None


def download_name(name: str, file_format: str) -> str:
    """The uploader's file name with its extension replaced by that of the detected format (unknown: .bin)."""
    fmt = _format_of(file_format)
    stem = name.rsplit(".", 1)[0] if "." in name.lstrip(".") else name
    return (stem.strip() or "file") + EXTENSIONS.get(fmt, ".bin")


async def get_file(request: Request) -> Response:
    services = require_ready(request)
    key = validate(request.path_params["id"], DOCUMENT_ID, "id")
    tenant = tenant_param(request)
    found = await asyncio.to_thread(services.files.original_file, tenant, key, name_param(request, "partition"))
    if found is None:
        raise ApiError.not_found(f"no document {key!r} from a file for tenant {tenant!r}", "id")
    doc, path = found
    try:
        info = await asyncio.to_thread(os.stat, path)
    except FileNotFoundError:  # deleted since the store was read
        raise ApiError.not_found(f"no document {key!r} from a file for tenant {tenant!r}", "id") from None
    name = download_name(doc.file.name, doc.file.format)
    headers = {
        # the original is a download, never a page of this origin: a stored HTML file must not run as one
        "Content-Disposition": f"attachment; filename*=UTF-8''{quote(name, safe='')}",
        "X-Content-Type-Options": "nosniff",
        "Content-Security-Policy": "sandbox",
        "ETag": f'"{doc.file.sha256}"',
    }
    media_type = MEDIA_TYPES.get(_format_of(doc.file.format), "application/octet-stream")
    # streamed from the blob store in chunks: a large original is never held whole in memory
    return FileResponse(path, media_type=media_type, headers=headers, stat_result=info)


routes = [
    Route("/v1/files", post_files, methods=["POST"], name="files"),
    Route("/v1/documents/{id:path}/file", get_file, methods=["GET"], name="documents"),
]
