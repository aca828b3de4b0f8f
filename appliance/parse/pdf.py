"""PDF: the text layer, read with pdfium (pypdfium2), in paragraph blocks with their page and heading path.

pdfium gives characters in reading order with line breaks; geometry (baseline, font size) turns lines into
paragraphs and headings. Sections come from the outline (bookmarks) where the PDF has one, else from font sizes.
pdfium is not thread-safe: parse in one thread per process (the parser pool uses processes).
"""
from __future__ import annotations

import ctypes
import math
import re
import statistics
from collections import Counter
from dataclasses import dataclass

import pypdfium2 as pdfium
import pypdfium2.raw as raw

from .document import Block, Format, ParsedDocument, ParseError, ParseErrorCode, ParseLimits
from .ocr import OCR_RENDER_SIDE, layout_lines, reader
from .pdf_layout import Line, Paragraph, assemble_paragraphs
from .text import NO_SPACE_CHARS

# pdfium ends lines with \r\n, and puts U+FFFE (0x02 one char at a time) where it took a hyphen for a hyphenation.
_HYPHEN_MARK = "\ufffe"
_LINE_BREAK = re.compile("[\n\ufffe]")
_VISIBLE = re.compile(r"[^\s\x00]")
# pdfium infers spaces from gaps; those next to CJK are layout (Latin-CJK spacing), not text: dropped.
_LAYOUT_SPACE = re.compile(f" (?=[{NO_SPACE_CHARS}])|(?<=[{NO_SPACE_CHARS}]) ")
_CJK = re.compile(f"[{NO_SPACE_CHARS}]")
_JUNK = re.compile("[\ufffd\ue000-\uf8ff\x00-\x1f]")  # what glyphs without a Unicode mapping come out as
_SURROGATE = re.compile("[\ud800-\udfff]")
_NOT_ALNUM = re.compile(r"[\W_]+")
_MAX_BOOKMARKS = 10_000
_MIN_PAGE_CHARS = 10  # fewer visible characters on a page (a stamp, a page number): its image is read instead
_MAX_PAGE_OBJECTS = 10_000  # objects looked at for an image on one page (hostile pages hold millions)
_SAMPLES = 5  # characters per line whose geometry is read: a median of a few resists sub- and superscripts
_HEADING_RATIO = 1.15
_MAX_HEADING_CHARS, _MAX_HEADING_LINES = 300, 6
_BAD_TITLE = re.compile(r"^(untitled( document)?|document\d*|slide \d+|no title|title|presentation\d*|"
                        r"microsoft (word|powerpoint|excel) - .*|.*\.(docx?|pptx?|xlsx?|pdf|rtf|odt|odp|txt|tex|dvi|"
                        r"indd|qxd|pages|html?|e?ps|ai|png|jpe?g|tiff?))$", re.I | re.S)


@dataclass(slots=True, frozen=True)
class _Bookmark:
    path: tuple[str, ...]  # its title after its ancestors'
    page: int  # 1-based
    top: float | None  # y it points to on the page, None: the top


def parse(data: bytes, limits: ParseLimits) -> ParsedDocument:
    doc = _open(data)
    try:
        pages = len(doc)
        if pages > limits.max_pages:
            raise ParseError(ParseErrorCode.TOO_LARGE, f"PDF has {pages} pages (limit {limits.max_pages})")
        if pages == 0:
            raise ParseError(ParseErrorCode.EMPTY, "PDF has no pages")
        meta_title = _meta_title(doc)
        bookmarks = _bookmarks(doc)
        per_page: list[list[Line]] = []
        chars = 0
        for index in range(pages):
            per_page.append(_page_lines(doc, index))
            chars += sum(len(line.text) for line in per_page[-1])
            if chars > limits.max_chars:
                raise ParseError(ParseErrorCode.TOO_LARGE, f"PDF text over {limits.max_chars} characters")
        ocr_pages = _read_images(doc, per_page, limits) if limits.ocr_models else []
        chars += sum(len(line.text) for page in ocr_pages for line in per_page[page - 1])  # pages had ~nothing
        if chars > limits.max_chars:
            raise ParseError(ParseErrorCode.TOO_LARGE, f"PDF text over {limits.max_chars} characters")
        lines = [line for page_lines in per_page for line in page_lines]
    finally:
        doc.close()
    _check_text_layer(lines, read_images=bool(limits.ocr_models))
    paragraphs = assemble_paragraphs(lines)
    title, blocks = _blocks(paragraphs, meta_title, bookmarks)
    return ParsedDocument(Format.PDF, title, blocks, pages=pages, ocr_pages=tuple(ocr_pages))


def _open(data: bytes) -> pdfium.PdfDocument:
    try:
        return pdfium.PdfDocument(data)
    except pdfium.PdfiumError as exc:
        code = getattr(exc, "err_code", None)
        if code == raw.FPDF_ERR_PASSWORD:
            raise ParseError(ParseErrorCode.ENCRYPTED, "encrypted PDF: it needs a password to open; "
                                                       "upload a copy without the password") from exc
        if code == raw.FPDF_ERR_SECURITY:
            raise ParseError(ParseErrorCode.ENCRYPTED, "encrypted PDF: unsupported security handler") from exc
        raise ParseError(ParseErrorCode.CORRUPT, f"damaged or truncated PDF: {exc}") from exc


def _meta_title(doc: pdfium.PdfDocument) -> str:
    title = " ".join((doc.get_metadata_value("Title") or "").split())
    meaningful = any(ch.isalpha() for ch in title) and len(title) <= 500 and not _BAD_TITLE.match(title)
    return title if meaningful else ""


def _bookmarks(doc: pdfium.PdfDocument) -> list[_Bookmark]:
    """The outline, in page order, each entry with its path; entries that lead nowhere are left out."""
    found: list[_Bookmark] = []
    stack: list[str] = []
    for seen, bookmark in enumerate(doc.get_toc(max_depth=8)):
        if seen >= _MAX_BOOKMARKS:
            break  # hostile outlines: enough to place sections
        del stack[bookmark.level:]
        stack.append(" ".join(bookmark.get_title().split()))
        place = _bookmark_place(doc, bookmark.raw)
        if place and all(stack):
            found.append(_Bookmark(tuple(stack), place[0], place[1]))
    return sorted(found, key=lambda b: (b.page, -(b.top if b.top is not None else math.inf)))


def _bookmark_place(doc: pdfium.PdfDocument, bookmark) -> tuple[int, float | None] | None:
    dest = raw.FPDFBookmark_GetDest(doc, bookmark)
    if not dest:
        action = raw.FPDFBookmark_GetAction(bookmark)
        dest = raw.FPDFAction_GetDest(doc, action) if action else None
    if not dest:
        return None
    index = raw.FPDFDest_GetDestPageIndex(doc, dest)
    if index < 0:
        return None
    has_x, has_y, has_zoom = (raw.FPDF_BOOL() for _ in range(3))
    x, y, zoom = (raw.FS_FLOAT() for _ in range(3))
    ok = raw.FPDFDest_GetLocationInPage(dest, has_x, has_y, has_zoom, x, y, zoom)
    return index + 1, (y.value if ok and has_y.value else None)


def _page_lines(doc: pdfium.PdfDocument, index: int) -> list[Line]:
    page = doc[index]
    try:
        textpage = page.get_textpage()
        try:
            return _read_lines(textpage, index + 1)
        finally:
            textpage.close()
    finally:
        page.close()


def _read_lines(textpage: pdfium.PdfTextPage, page: int) -> list[Line]:
    text = _page_text(textpage)
    lines: list[Line] = []
    start = 0
    for end in [m.start() for m in _LINE_BREAK.finditer(text)] + [len(text)]:
        line = _line(textpage, text, start, end, page, hyphen=text[end:end + 1] == _HYPHEN_MARK)
        if line:
            lines.append(line)
        start = end + 1
    return lines


def _page_text(textpage: pdfium.PdfTextPage) -> str:
    """The page's characters, one per pdfium character index (what the geometry calls take)."""
    count = textpage.count_chars()
    if count <= 0:
        return ""
    buffer = ctypes.create_string_buffer((count + 1) * 2)
    written = raw.FPDFText_GetText(textpage, 0, count, ctypes.cast(buffer, ctypes.POINTER(ctypes.c_ushort)))
    text = buffer.raw[:max(0, written - 1) * 2].decode("utf-16-le", "surrogatepass")
    if len(text) != count:  # not one UTF-16 unit per character: ask one by one
        text = "".join(chr(raw.FPDFText_GetUnicode(textpage, i) or 0xFFFD) for i in range(count))
    return text.replace("\x02", _HYPHEN_MARK)


def _line(textpage, text: str, start: int, end: int, page: int, hyphen: bool) -> Line | None:
    segment = text[start:end]
    drop = {m.start() for m in _LAYOUT_SPACE.finditer(segment)
            if raw.FPDFText_IsGenerated(textpage, start + m.start()) == 1} if _CJK.search(segment) else set()
    line = "".join(ch for k, ch in enumerate(segment) if k not in drop) if drop else segment
    line = _fix_surrogates(line.replace("\r", "").replace("\x00", "")).strip()
    if not line:
        return None
    samples = _visible_samples(segment, start)
    sizes, baselines = [], []
    x, y = ctypes.c_double(), ctypes.c_double()
    matrix = raw.FS_MATRIX()
    for i in samples:
        raw.FPDFText_GetCharOrigin(textpage, i, x, y)
        baselines.append(y.value)
        # The font size pdfium reports ignores the text and page matrices; the char matrix has both.
        scale = math.sqrt(abs(matrix.a * matrix.d - matrix.b * matrix.c)) \
            if raw.FPDFText_GetMatrix(textpage, i, matrix) else 1.0
        sizes.append(raw.FPDFText_GetFontSize(textpage, i) * scale)
    raw.FPDFText_GetCharOrigin(textpage, samples[0], x, y)
    left = x.value
    box = [ctypes.c_double() for _ in range(4)]
    raw.FPDFText_GetCharBox(textpage, samples[-1], *box)
    return Line(line, page, statistics.median(sizes), statistics.median(baselines), left, box[1].value, hyphen)


def _visible_samples(segment: str, start: int) -> list[int]:
    """Page indices of a few visible characters spread over the line, its first and last among them."""
    visible = [m.start() for m in _VISIBLE.finditer(segment)]
    step = max(1, (len(visible) - 1) / (_SAMPLES - 1))
    picked = sorted({visible[min(len(visible) - 1, round(k * step))] for k in range(_SAMPLES)} | {visible[-1]})
    return [start + k for k in picked]


def _fix_surrogates(text: str) -> str:
    """Pairs of UTF-16 halves (characters past U+FFFF) as one character."""
    return text.encode("utf-16", "surrogatepass").decode("utf-16", "replace") if _SURROGATE.search(text) else text


def _visible_and_junk(lines: list[Line]) -> tuple[int, int]:
    """Characters that are not spaces, and those without a Unicode mapping among them."""
    text = "".join(line.text for line in lines)
    return len(text) - text.count(" "), len(_JUNK.findall(text))


def _has_text(lines: list[Line]) -> bool:
    """A text layer worth reading: a few visible characters, most of them mapped to Unicode."""
    visible, junk = _visible_and_junk(lines)
    return visible >= _MIN_PAGE_CHARS and junk <= 0.5 * visible


def _read_images(doc: pdfium.PdfDocument, per_page: list[list[Line]], limits: ParseLimits) -> list[int]:
    """OCR for the pages that show an image and have no text layer worth reading; their lines replace the page's in
    `per_page`. Returns their numbers. A scan (most pages such) with more of them than `max_ocr_pages` is refused;
    in a text document (a few scanned inserts, figure pages) the pages past the limit are left as they are."""
    unread = [i for i, page_lines in enumerate(per_page) if not _has_text(page_lines) and _has_image(doc, i)]
    if not unread:
        return []
    if len(unread) > limits.max_ocr_pages and 2 * len(unread) > len(per_page):
        raise ParseError(ParseErrorCode.TOO_LARGE, f"the PDF has {len(unread)} scanned pages (the most read by OCR "
                                                   f"in one file: {limits.max_ocr_pages}, parse.max_ocr_pages)")
    sizes = [line.size for page_lines in per_page for line in page_lines]
    body = statistics.median(sizes) if sizes else None  # OCR lines sized as this document's own text
    for index in unread[:limits.max_ocr_pages]:
        per_page[index] = _ocr_lines(doc, index, limits, body)
    return [index + 1 for index in unread[:limits.max_ocr_pages]]


def _has_image(doc: pdfium.PdfDocument, index: int) -> bool:
    """Whether the page draws an image (top-level objects): a blank page or vector art has nothing to read."""
    page = doc[index]
    try:
        return any(raw.FPDFPageObj_GetType(raw.FPDFPage_GetObject(page, i)) == raw.FPDF_PAGEOBJ_IMAGE
                   for i in range(min(raw.FPDFPage_CountObjects(page), _MAX_PAGE_OBJECTS)))
    finally:
        page.close()


def _ocr_lines(doc: pdfium.PdfDocument, index: int, limits: ParseLimits, body: float | None) -> list[Line]:
    """The page rendered at ~2000 px on its long side and read by OCR, as lines in the page's own units."""
    page = doc[index]
    try:
        width, height = page.get_size()
        scale = OCR_RENDER_SIDE / max(width, height, 1.0)
        bitmap = page.render(scale=scale, rev_byteorder=True)  # RGB
        try:
            image = bitmap.to_numpy()[:, :, :3]
            lines = reader(limits.ocr_models).read(image)
            return layout_lines(lines, index + 1, scale, image.shape[0], body)
        finally:
            bitmap.close()
    finally:
        page.close()


def _check_text_layer(lines: list[Line], read_images: bool) -> None:
    visible, junk = _visible_and_junk(lines)
    if visible == 0 and read_images:
        raise ParseError(ParseErrorCode.NO_TEXT_LAYER, "no text: the pages have no text layer and OCR found no "
                                                       "text on their images")
    if visible == 0:
        raise ParseError(ParseErrorCode.NO_TEXT_LAYER, "no text layer: needs OCR (scanned pages; parse.ocr_model "
                                                       "is off)")
    if junk > 0.5 * visible:
        raise ParseError(ParseErrorCode.NO_TEXT_LAYER, "no text layer: the text has no Unicode mapping "
                                                       "(fonts without ToUnicode); needs OCR")


def _blocks(paragraphs: list[Paragraph], meta_title: str,
            bookmarks: list[_Bookmark]) -> tuple[str, list[Block]]:
    """The title and the blocks; headings become section paths, the title heading neither block nor section."""
    body = _body_size(paragraphs)
    headings = [p for p in paragraphs if _is_heading(p, body)]
    title, title_heading = _title(meta_title, headings, paragraphs)
    title_key = _key(title)
    # The title is no section: LibreOffice, for one, puts it atop the outline.
    marks = [_Bookmark(tuple(t for t in b.path if _key(t) != title_key), b.page, b.top) for b in bookmarks]
    marks = [b for b in marks if b.path]
    if marks:
        return title, _outline_blocks(paragraphs, headings, title_heading, marks)
    return title, _font_blocks(paragraphs, headings, title_heading)


def _body_size(paragraphs: list[Paragraph]) -> float:
    sizes: Counter[float] = Counter()
    for p in paragraphs:
        sizes[round(p.size * 2) / 2] += len(p.text)
    return _weighted_median(sizes)


def _weighted_median(counts: Counter[float]) -> float:
    half, seen = sum(counts.values()) / 2, 0
    for value in sorted(counts):
        seen += counts[value]
        if seen >= half:
            return value
    return 0.0


def _is_heading(p: Paragraph, body: float) -> bool:
    return (p.size >= _HEADING_RATIO * body and len(p.text) <= _MAX_HEADING_CHARS
            and p.lines <= _MAX_HEADING_LINES and any(ch.isalnum() for ch in p.text))


def _title(meta_title: str, headings: list[Paragraph],
           paragraphs: list[Paragraph]) -> tuple[str, Paragraph | None]:
    """The metadata title, else the biggest heading on page 1; and the paragraph that shows it, if any."""
    if meta_title:
        key = _key(meta_title)
        same = [p for p in paragraphs[:20] if p.page == 1 and len(p.text) < 2 * len(meta_title) + 10
                and _key(p.text) == key]
        return meta_title, (same[0] if same else None)
    first_page = [h for h in headings if h.page == 1]
    if not first_page:
        return "", None
    biggest = max(first_page, key=lambda h: h.size)  # max keeps the first of equals
    return biggest.text, biggest


def _key(text: str) -> str:
    """What two renderings of a title share: letters and digits."""
    return _NOT_ALNUM.sub("", text.casefold())


def _font_blocks(paragraphs: list[Paragraph], headings: list[Paragraph],
                 title_heading: Paragraph | None) -> list[Block]:
    levels = {size: rank for rank, size in enumerate(sorted({round(h.size) for h in headings}, reverse=True))}
    heading_ids = {id(h) for h in headings}
    path: list[tuple[int, str]] = []
    blocks = []
    for p in paragraphs:
        if p is title_heading:
            continue
        if id(p) in heading_ids:
            level = levels[round(p.size)]
            while path and path[-1][0] >= level:
                path.pop()
            path.append((level, p.text))
        else:
            blocks.append(Block(p.text, p.page, tuple(text for _, text in path)))
    return blocks


def _outline_blocks(paragraphs: list[Paragraph], headings: list[Paragraph], title_heading: Paragraph | None,
                    marks: list[_Bookmark]) -> list[Block]:
    """Sections from the outline: each block is under the last entry that points at or above it."""
    outline_keys = {_key(t) for b in marks for t in b.path}
    dropped = {id(h) for h in headings if _key(h.text) in outline_keys}
    blocks = []
    current: tuple[str, ...] = ()
    at = 0
    for p in paragraphs:
        top = p.baseline + p.size
        while at < len(marks) and (marks[at].page < p.page or marks[at].page == p.page and (
                marks[at].top is None or marks[at].top + 2 >= top)):
            current = marks[at].path
            at += 1
        if p is title_heading or id(p) in dropped:
            continue
        blocks.append(Block(p.text, p.page, current))
    return blocks
