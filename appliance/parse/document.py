"""What a parser makes of a file: its text in blocks, each with the page and heading path it sits under."""
from __future__ import annotations

from dataclasses import dataclass, field
from enum import StrEnum


class Format(StrEnum):
    PDF = "pdf"
    DOCX = "docx"
    PPTX = "pptx"
    HTML = "html"
    MARKDOWN = "markdown"
    TEXT = "text"
    PNG = "png"  # images: their text read by OCR
    JPEG = "jpeg"
    TIFF = "tiff"


MEDIA_TYPES = {
    Format.PDF: "application/pdf",
    Format.DOCX: "application/vnd.openxmlformats-officedocument.wordprocessingml.document",
    Format.PPTX: "application/vnd.openxmlformats-officedocument.presentationml.presentation",
    Format.HTML: "text/html",
    Format.MARKDOWN: "text/markdown",
    Format.TEXT: "text/plain",
    Format.PNG: "image/png",
    Format.JPEG: "image/jpeg",
    Format.TIFF: "image/tiff",
}

# Bumped when a parser's output changes: documents parsed by an older version are parsed again by `reindex`.
PARSER_VERSION = 2  # 2: tables as rows under their header (Block.header)


@dataclass(slots=True, frozen=True)
class Block:
    """A paragraph, list item, table row group, slide text frame...: text that belongs together.

    `page` is 1-based (PDF page, PPTX slide), None where the format has no pages. `section` is the heading path
    above the block, outermost first, without the heading taken as the document's title. A table (`table_block`) is
    one line a row, its cells joined by " | ", and `header` says how many of its first lines head it (caption and
    header rows): the chunker repeats them with every chunk of its rows.
    """
    text: str
    page: int | None = None
    section: tuple[str, ...] = ()
    header: int | None = None  # a table's heading lines; None: not a table

    @property
    def is_table(self) -> bool:
        return self.header is not None


CELL_SEPARATOR = " | "


def table_block(rows: list[list[str]], header_rows: int, page: int | None = None, section: tuple[str, ...] = (),
                caption: str = "") -> Block | None:
    """A table's block from its rows of cell texts (empty rows dropped). `header_rows`: how many of the first rows
    head the table; where the file does not mark them, the parsers take the first row of a table of two or more."""
    lines, heading = [caption] if caption else [], 1 if caption else 0
    for number, cells in enumerate(rows):
        if any(cells):
            lines.append(CELL_SEPARATOR.join(cells))
            heading += number < header_rows
    if len(lines) <= heading:  # nothing but headings: a one-line table is text
        return Block("\n".join(lines), page, section) if lines else None
    return Block("\n".join(lines), page, section, heading)


@dataclass(slots=True, frozen=True)
class ParsedDocument:
    format: Format
    title: str  # the document's own title (PDF/Office metadata, <title>, first top heading); "" if none
    blocks: list[Block] = field(default_factory=list)
    pages: int | None = None  # PDF pages, PPTX slides
    encoding: str | None = None  # text formats: the encoding the bytes were decoded from
    ocr_pages: tuple[int, ...] = ()  # pages (1-based) whose text was read from their image: scans, photos

    @property
    def text(self) -> str:
        return "\n\n".join(b.text for b in self.blocks)


class ParseErrorCode(StrEnum):
    UNSUPPORTED = "unsupported_format"  # HTTP 415
    CORRUPT = "corrupt_file"  # 422
    ENCRYPTED = "encrypted"  # 422
    NO_TEXT_LAYER = "no_text_layer"  # 422: a scan; needs OCR
    EMPTY = "empty_document"  # 422: parsed, but no text at all
    TOO_LARGE = "too_large"  # 413: the file, or what it unpacks to (zip bombs), is past a limit
    TIMEOUT = "parse_timeout"  # 422: the parser ran past parse.timeout_s and was stopped
    OUT_OF_MEMORY = "parse_out_of_memory"  # 422: the parser ran past parse.max_memory_mib
    CRASHED = "parser_crashed"  # 422: the parser process died


class ParseError(Exception):
    """A file that cannot be turned into a document, and why, in words a user can act on."""

    def __init__(self, code: ParseErrorCode, message: str):
        super().__init__(message)
        self.code, self.message = code, message

    def __reduce__(self):  # crosses the worker-process boundary
        return (ParseError, (self.code, self.message))


@dataclass(slots=True, frozen=True)
class ParseLimits:
    """What a file may unpack to before it is refused (zip bombs, absurd part counts)."""
    max_unpacked_bytes: int = 512 * 1024 * 1024
    max_parts: int = 10_000
    max_ratio: int = 200  # uncompressed / compressed, per part and for the whole archive
    max_pages: int = 5_000
    max_chars: int = 50_000_000  # text extracted from one file
    ocr_models: str = ""  # the OCR models' folder (det.onnx, rec.onnx); "" reads no page images
    max_ocr_pages: int = 10  # pages of one file read from their image (seconds each on one core)
    max_image_pixels: int = 60_000_000  # an image's width x height, checked before it is decoded (image bombs)
