"""Bytes in, `ParsedDocument` out: the format told from the content, then that format's parser, then the checks
every format shares. Parser libraries fail in their own ways; whatever they raise reaches the caller as a
ParseError with a message a user can act on, never as a traceback."""
from __future__ import annotations

import importlib

from .archive import OLE_MAGIC, ole_error
from .detect import detect_format
from .document import Format, ParsedDocument, ParseError, ParseErrorCode, ParseLimits

# Each module has `parse(data: bytes, limits: ParseLimits) -> ParsedDocument`; imported on first use, so a format's
# libraries load only in the processes that meet such a file.
_MODULES = {Format.PDF: "pdf", Format.DOCX: "docx", Format.PPTX: "pptx", Format.HTML: "html",
            Format.MARKDOWN: "markdown", Format.TEXT: "text", Format.PNG: "image", Format.JPEG: "image",
            Format.TIFF: "image"}
_NAMES = {Format.PDF: "PDF", Format.DOCX: "Word (DOCX)", Format.PPTX: "PowerPoint (PPTX)", Format.HTML: "HTML",
          Format.MARKDOWN: "Markdown", Format.TEXT: "text", Format.PNG: "PNG image", Format.JPEG: "JPEG image",
          Format.TIFF: "TIFF image"}
_SUPPORTED = "supported: PDF, DOCX, PPTX, HTML, Markdown, plain text, PNG/JPEG/TIFF images (OCR)"
_IMAGES = (Format.PNG, Format.JPEG, Format.TIFF)


def parse_bytes(data: bytes, limits: ParseLimits = ParseLimits()) -> ParsedDocument:
    data = bytes(data)
    if not data.strip():
        raise ParseError(ParseErrorCode.EMPTY, "empty file: no content")
    fmt = detect_format(data)
    if fmt is None and data.startswith(OLE_MAGIC) and (locked := ole_error(data)).code is ParseErrorCode.ENCRYPTED:
        raise locked  # a password-protected DOCX/PPTX is an OLE file too: told apart from an old .doc
    if fmt is None:
        raise ParseError(ParseErrorCode.UNSUPPORTED, f"unsupported format: {_describe(data)}; {_SUPPORTED}")
    module = _parser(fmt)
    try:
        doc = module.parse(data, limits)
    except ParseError:
        raise
    except MemoryError as exc:
        raise ParseError(ParseErrorCode.OUT_OF_MEMORY, f"the {_NAMES[fmt]} file needs too much memory") from exc
    except Exception as exc:  # noqa: BLE001 - any library failure on a bad file is the file's fault
        raise ParseError(ParseErrorCode.CORRUPT, f"could not read the {_NAMES[fmt]} file: {_brief(exc)}") from exc
    return _checked(doc, fmt, limits)


def _parser(fmt: Format):
    name = f"{__package__}.{_MODULES[fmt]}"
    try:
        return importlib.import_module(name)
    except ModuleNotFoundError as exc:
        if exc.name != name:
            raise  # a missing library is an installation fault, not the file's
        raise ParseError(ParseErrorCode.UNSUPPORTED, f"unsupported format: no {_NAMES[fmt]} parser installed; "
                                                     f"{_SUPPORTED}") from exc


def _checked(doc: ParsedDocument, fmt: Format, limits: ParseLimits) -> ParsedDocument:
    chars = sum(len(block.text) for block in doc.blocks)
    if chars > limits.max_chars:
        raise ParseError(ParseErrorCode.TOO_LARGE, f"the document's text is {chars} characters "
                                                   f"(limit {limits.max_chars})")
    if not any(block.text.strip() for block in doc.blocks):
        if fmt is Format.PDF or fmt in _IMAGES:
            raise ParseError(ParseErrorCode.NO_TEXT_LAYER, "no text: OCR found none on the "
                                                           f"{'pages' if fmt is Format.PDF else 'image'}")
        raise ParseError(ParseErrorCode.EMPTY, f"empty document: the {_NAMES[fmt]} file has no text")
    return doc


def _describe(data: bytes) -> str:
    if data.startswith(b"PK\x03\x04"):
        return "a zip archive that is not a DOCX or PPTX file"
    if data.startswith(b"\xd0\xcf\x11\xe0"):
        return "an old Office file (.doc/.ppt/.xls); save it as DOCX or PPTX"
    if data.startswith(b"GIF8"):
        return "a GIF image (PNG, JPEG and TIFF images are read by OCR)"
    return "binary or undecodable content"


def _brief(exc: Exception) -> str:
    text = " ".join(str(exc).split()) or type(exc).__name__
    return text[:300]
