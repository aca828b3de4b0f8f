"""Which format a file is, from its content alone: magic bytes first, then the decoded text. Never the file name."""
from __future__ import annotations

import io
import re
import zipfile

from .document import Format, ParseError, ParseErrorCode
from .text import decode_text

__all__ = ["decode_text", "detect_format", "looks_like_html", "looks_like_markdown"]

_PDF_WINDOW = 1024  # readers accept junk before %PDF- in the first KiB
_PDF_HEADER = re.compile(rb"%PDF-[12]\.\d")
_ZIP = b"PK\x03\x04"
_UTF16_32_BOMS = (b"\xff\xfe", b"\xfe\xff", b"\x00\x00\xfe\xff")
_IMAGES = ((b"\x89PNG\r\n\x1a\n", Format.PNG), (b"\xff\xd8\xff", Format.JPEG), (b"II*\x00", Format.TIFF),
           (b"MM\x00*", Format.TIFF))
# Binary formats whose first bytes carry no NUL and so could pass for text.
_BINARY_MAGIC = (b"GIF87a", b"GIF89a", b"\xd0\xcf\x11\xe0\xa1\xb1\x1a\xe1",
                 b"\x1f\x8b", b"7z\xbc\xaf\x27\x1c", b"Rar!\x1a\x07", b"\xfd7zXZ\x00", b"\x28\xb5\x2f\xfd",
                 b"{\\rtf", b"%!PS", b"\x7fELF", b"PK\x05\x06", b"PK\x07\x08")
_TEXT_WINDOW = 65536  # characters the text heuristics look at

_HTML_START = re.compile(r"<(!doctype\s+html|html|head|body)[\s>/]", re.I)
_HTML_ANYWHERE = re.compile(r"<!doctype\s+html|<(html|head|body)[\s>]", re.I)
_HTML_FRAGMENT_START = re.compile(r"<(meta|title|div|p|table|section|article|h[1-6]|ul|ol|script|style|link)[\s>/]",
                                  re.I)
_TAG = re.compile(r"</?[a-zA-Z][a-zA-Z0-9]*(\s[^<>]*)?/?>")
_PROLOG = re.compile(r"(\s+|<!--.*?-->|<\?xml[^>]*\?>)", re.S)

_ATX = re.compile(r"^ {0,3}#{1,6}[ \t]+\S", re.M)
_SETEXT = re.compile(r"^ {0,3}\S[^\n]*\n {0,3}(=+|-{2,})[ \t]*$", re.M)
_FENCE = re.compile(r"^ {0,3}(```|~~~)[^\n]*\n.*?^ {0,3}\1", re.M | re.S)
_TABLE_RULE = re.compile(r"^ {0,3}\|?[ \t]*:?-{3,}:?[ \t]*(\|[ \t]*:?-{3,}:?[ \t]*)+\|?[ \t]*$", re.M)
_LIST_ITEM = re.compile(r"^ {0,3}([-*+]|\d{1,3}[.)])[ \t]+\S", re.M)
# Linear on hostile text (64 KiB of `[` or `**a ` took seconds to minutes): a scan that starts at a `[`, `(`,
# `**` or `__` stops at the next one, so no character is scanned from more than one start.
_LINK = re.compile(r"!?\[[^\[\]\n]+\]\([^()\s]+(\s+\"[^\"\n]*\")?\)")
_EMPHASIS = re.compile(r"\*\*[^\s*][^\n*]*?[^\s*]\*\*|__[^\s_][^\n_]*?[^\s_]__|`[^`\n]+`")
_QUOTE = re.compile(r"^ {0,3}> ?\S", re.M)


def detect_format(data: bytes) -> Format | None:
    """The format of `data`, or None when it is none we parse (GIFs, archives, old .doc, binary junk).

    Raises ParseError(CORRUPT) for a zip that cannot be opened: it claims to be an Office file but is damaged.
    """
    if _PDF_HEADER.search(data, 0, _PDF_WINDOW + 8):
        return Format.PDF
    if data.startswith(_ZIP):
        return _office_format(data)
    for magic, image in _IMAGES:
        if data.startswith(magic):
            return image
    if data.startswith(_BINARY_MAGIC) or _looks_binary(data):
        return None
    try:
        text, _ = decode_text(data)
    except ParseError:
        return None
    return text_format(text[:_TEXT_WINDOW])


def _looks_binary(data: bytes) -> bool:
    return b"\x00" in data[:_TEXT_WINDOW] and not data.startswith(_UTF16_32_BOMS)


def _office_format(data: bytes) -> Format | None:
    try:
        with zipfile.ZipFile(io.BytesIO(data)) as archive:
            names = set(archive.namelist())
    except (zipfile.BadZipFile, zipfile.LargeZipFile, OSError, ValueError, EOFError) as exc:
        raise ParseError(ParseErrorCode.CORRUPT, f"damaged or truncated Office file (zip): {exc}") from exc
    if "word/document.xml" in names:
        return Format.DOCX
    if "ppt/presentation.xml" in names:
        return Format.PPTX
    return None  # some other zip: xlsx, odt, epub, a plain archive


def text_format(text: str) -> Format:
    """HTML, Markdown or plain text, for text already decoded."""
    if looks_like_html(text, strict=True):
        return Format.HTML
    if looks_like_markdown(text):
        return Format.MARKDOWN
    if looks_like_html(text, strict=False):
        return Format.HTML
    return Format.TEXT


def looks_like_html(text: str, strict: bool) -> bool:
    """strict: starts, past BOM, blanks, comments and an XML prolog, with <!doctype html>, <html>, <head> or <body>.

    Otherwise: such a tag in the first 4 KiB of text that is mostly markup, or a fragment opening with a common tag.
    """
    start = _skip_prolog(text.lstrip("\ufeff"))
    if _HTML_START.match(start):
        return True
    if strict:
        return False
    head = text[:4096]
    tags = len(_TAG.findall(head))
    if _HTML_ANYWHERE.search(head) and tags >= 3:
        return True
    return bool(_HTML_FRAGMENT_START.match(start)) and tags >= 4 and "</" in head


def _skip_prolog(text: str) -> str:
    pos = 0
    while match := _PROLOG.match(text, pos):
        if match.end() == pos:
            break
        pos = match.end()
    return text[pos:]


def looks_like_markdown(text: str) -> bool:
    """One structural construct (ATX heading, setext underline, fenced code, table rule) or three lighter ones."""
    if _ATX.search(text) or _SETEXT.search(text) or _FENCE.search(text) or _TABLE_RULE.search(text):
        return True
    light = (min(len(_LIST_ITEM.findall(text)), 3) + len(_LINK.findall(text)) + len(_EMPHASIS.findall(text))
             + min(len(_QUOTE.findall(text)), 2))
    kinds = sum(1 for rx in (_LIST_ITEM, _LINK, _EMPHASIS, _QUOTE) if rx.search(text))
    return light >= 3 and kinds >= 2
