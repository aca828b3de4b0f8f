"""DOCX -> blocks: paragraphs and tables in body order, under the heading path that Word's heading styles build.

python-docx gives the package, styles and core properties; the body is walked on its XML directly, because
`Paragraph.text` skips runs inside tracked insertions, content controls and fields, and `iter_inner_content()`
skips block-level content controls (`w:sdt`), where templates often put their text.
"""
from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import dataclass, replace

import docx
from lxml import etree

from .archive import meaningful_title, safe_package
from .document import (CELL_SEPARATOR, Block, Format, ParsedDocument, ParseError, ParseErrorCode, ParseLimits,
                       table_block)

_W = "{http://schemas.openxmlformats.org/wordprocessingml/2006/main}"
# Not text: properties (their w:tab elements are tab stops), deleted text, the fallback copy of text boxes.
_SKIP = {f"{_W}pPr", f"{_W}rPr", f"{_W}del", f"{_W}moveFrom",
         "{http://schemas.openxmlformats.org/markup-compatibility/2006}Fallback"}
_P, _TBL, _TR, _TC = f"{_W}p", f"{_W}tbl", f"{_W}tr", f"{_W}tc"
# Containers whose children are body content (content controls, custom XML, tracked moves).
_TRANSPARENT = {f"{_W}sdt", f"{_W}sdtContent", f"{_W}customXml", f"{_W}ins", f"{_W}moveTo"}
_TEXT_TAGS = {f"{_W}t": None, f"{_W}tab": "\t", f"{_W}br": "\n", f"{_W}cr": "\n", f"{_W}noBreakHyphen": "-",
              f"{_W}softHyphen": ""}
_HEADING_NAME = re.compile(r"heading\s*([1-9])", re.IGNORECASE)
_TITLE = 0  # level of a "Title"-styled paragraph: above Heading 1
_NOT_HEADING, _TOC = -1, -2  # style levels: a style that is no heading despite its outline level; a TOC entry
_MAX_STYLE_DEPTH = 10


@dataclass(slots=True)
class _Item:
    text: str
    level: int | None = None  # heading level (0 = Title style, 1..9), None for body paragraphs and tables
    table: Block | None = None  # a table's rows under its header (its section is set in _blocks)


def parse(data: bytes, limits: ParseLimits) -> ParsedDocument:
    package = safe_package(data, limits)  # zip bombs are refused before anything is inflated
    try:
        document = docx.Document(package)
    except Exception as e:  # python-docx raises KeyError, ValueError, lxml errors... on broken packages
        raise ParseError(ParseErrorCode.CORRUPT, f"The DOCX file could not be read: {type(e).__name__}: {e}")
    levels = _StyleLevels(document.styles.element)
    items = [item for item in _items(document.element.body, levels) if item.text]
    core_title = meaningful_title(document.core_properties.title)
    title, skip = _choose_title(items, core_title)
    blocks = _blocks(items, skip)
    if not blocks and skip is not None:  # a document that is only its title: keep the text
        blocks = [Block(items[skip].text)]
    _check_size(blocks, limits)
    if not blocks:
        raise ParseError(ParseErrorCode.EMPTY, "The DOCX file holds no text.")
    return ParsedDocument(Format.DOCX, title, blocks, pages=None)


class _StyleLevels:
    """Paragraph style id -> heading level, by name ("Heading 2", "Title") or outline level, through `basedOn`;
    worked out only for the styles the paragraphs use (a template defines hundreds)."""

    def __init__(self, styles: etree._Element):
        self.by_id = {s.get(f"{_W}styleId"): s for s in styles.iterchildren(f"{_W}style")
                      if s.get(f"{_W}type") == "paragraph"}
        self.known: dict[str, int | None] = {}

    def get(self, style_id: str | None) -> int | None:
        if style_id not in self.known:
            self.known[style_id] = self._resolve(style_id)
        return self.known[style_id]

    def _resolve(self, style_id: str | None) -> int | None:
        style = self.by_id.get(style_id)
        for _ in range(_MAX_STYLE_DEPTH):
            if style is None:
                return None
            level = _own_style_level(style)
            if level is not None:
                return level
            based = style.find(f"{_W}basedOn")
            style = self.by_id.get(based.get(f"{_W}val")) if based is not None else None
        return None


def _own_style_level(style: etree._Element) -> int | None:
    name_el = style.find(f"{_W}name")
    name = " ".join((name_el.get(f"{_W}val", "") if name_el is not None else "").split()).lower()
    if name == "title":
        return _TITLE
    if name.startswith("toc"):  # "TOC Heading", "TOC 1"...: the table of contents repeats the headings
        return _TOC
    if name in {"subtitle", "caption"}:
        return _NOT_HEADING
    match = _HEADING_NAME.fullmatch(name)
    if match:
        return int(match.group(1))
    return _outline_level(style.find(f"{_W}pPr"))


def _outline_level(ppr: etree._Element | None) -> int | None:
    lvl = ppr.find(f"{_W}outlineLvl") if ppr is not None else None
    try:
        value = int(lvl.get(f"{_W}val")) if lvl is not None else 9
    except (TypeError, ValueError):
        return None
    return value + 1 if 0 <= value < 9 else None  # 9 is "body text"


def _items(container: etree._Element, levels: _StyleLevels) -> Iterator[_Item]:
    """Paragraphs and tables in reading order, looking through content controls and the like."""
    stack = [iter(container)]
    while stack:
        child = next(stack[-1], None)
        if child is None:
            stack.pop()
        elif child.tag == _P:
            level = _paragraph_level(child, levels)
            if level != _TOC:
                yield _Item(_paragraph_text(child), None if level == _NOT_HEADING else level)
        elif child.tag == _TBL and (table := _table(child)) is not None:
            yield _Item(table.text, table=table)
        elif child.tag in _TRANSPARENT:
            stack.append(iter(child))


def _paragraph_level(p: etree._Element, levels: _StyleLevels) -> int | None:
    ppr = p.find(f"{_W}pPr")
    style = ppr.find(f"{_W}pStyle") if ppr is not None else None
    by_style = levels.get(style.get(f"{_W}val")) if style is not None else None
    own = _outline_level(ppr) if by_style != _TOC else None  # the paragraph's own outline level comes first
    return own if own is not None else by_style


def _paragraph_text(p: etree._Element) -> str:
    """The visible text, text boxes included once (their `mc:Fallback` copy is skipped); deleted text is not."""
    parts: list[str] = []
    stack = [iter(p)]
    while stack:
        el = next(stack[-1], None)
        if el is None:
            stack.pop()
            continue
        if el.tag in _SKIP:
            continue
        if el.tag in _TEXT_TAGS:
            fixed = _TEXT_TAGS[el.tag]
            parts.append((el.text or "") if fixed is None else fixed)
        elif el.tag == _P and parts:  # a paragraph of a text box inside this one
            parts.append("\n")
        stack.append(iter(el))
    return _collapse("".join(parts))


def _table(tbl: etree._Element) -> Block | None:
    """Its rows of cells; the rows Word repeats on each page (`w:tblHeader`) head it, else its first row."""
    rows, marked = [], 0
    for tr in _children(tbl, _TR):
        if len(rows) == marked and _repeats_as_header(tr):
            marked += 1
        rows.append([_cell_text(tc) for tc in _children(tr, _TC)])
    return table_block(rows, marked or 1)


def _repeats_as_header(tr: etree._Element) -> bool:
    trpr = tr.find(f"{_W}trPr")
    mark = trpr.find(f"{_W}tblHeader") if trpr is not None else None
    return mark is not None and mark.get(f"{_W}val", "true").lower() not in ("0", "false", "off")


def _cell_text(tc: etree._Element) -> str:
    """A cell's paragraphs; a nested table's rows go into its cell, one after another."""
    texts = [_paragraph_text(el) if el.tag == _P else _nested_text(el) for el in _content(tc)]
    return " ".join(t for t in texts if t)


def _nested_text(tbl: etree._Element) -> str:
    rows = (CELL_SEPARATOR.join(_cell_text(tc) for tc in _children(tr, _TC)) for tr in _children(tbl, _TR))
    return " ; ".join(row for row in rows if row.strip(" |"))


def _children(parent: etree._Element, tag: str) -> Iterator[etree._Element]:
    for child in parent:
        if child.tag == tag:
            yield child
        elif child.tag in _TRANSPARENT:
            yield from _children(child, tag)


def _content(tc: etree._Element) -> Iterator[etree._Element]:
    for child in tc:
        if child.tag in (_P, _TBL):
            yield child
        elif child.tag in _TRANSPARENT:
            yield from _content(child)


def _choose_title(items: list[_Item], core_title: str) -> tuple[str, int | None]:
    """The title, and the index of the paragraph that states it (left out of blocks and sections), if any."""
    candidate = _title_paragraph(items)
    if core_title:
        same = candidate is not None and items[candidate].text.casefold() == core_title.casefold()
        return core_title, candidate if same else None
    if candidate is None:
        return "", None
    return items[candidate].text, candidate


def _title_paragraph(items: list[_Item]) -> int | None:
    # A "Title" paragraph; else the first heading, when it is a Heading 1.
    headings = [i for i, item in enumerate(items) if item.level is not None]
    for i in headings:
        if items[i].level == _TITLE:
            return i
    return headings[0] if headings and items[headings[0]].level == 1 else None


def _blocks(items: list[_Item], skip: int | None) -> list[Block]:
    path: list[tuple[int, str]] = []
    blocks: list[Block] = []
    for i, item in enumerate(items):
        if i == skip:
            continue
        if item.level is None:
            section = tuple(text for _, text in path)
            blocks.append(replace(item.table, section=section) if item.table else Block(item.text, None, section))
            continue
        while path and path[-1][0] >= item.level:
            path.pop()
        path.append((item.level, item.text))
    return blocks


def _check_size(blocks: list[Block], limits: ParseLimits) -> None:
    chars = sum(len(b.text) for b in blocks)
    if chars > limits.max_chars:
        raise ParseError(ParseErrorCode.TOO_LARGE, f"The document holds {chars:,} characters of text; "
                                                   f"the limit is {limits.max_chars:,}.")


def _collapse(text: str) -> str:
    # Runs of spaces collapse; line breaks the author typed (w:br) stay.
    lines = (" ".join(line.split()) for line in text.split("\n"))
    return "\n".join(line for line in lines if line)
