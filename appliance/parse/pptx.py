"""PPTX -> blocks: one slide is one page; its title is the section of its text frames, tables and notes."""
from __future__ import annotations

from collections.abc import Iterable, Iterator
from dataclasses import replace

import pptx
from pptx.enum.shapes import PP_PLACEHOLDER
from pptx.shapes.group import GroupShape

from .archive import meaningful_title, safe_package
from .document import Block, Format, ParsedDocument, ParseError, ParseErrorCode, ParseLimits, table_block

_TITLE_TYPES = {PP_PLACEHOLDER.TITLE, PP_PLACEHOLDER.CENTER_TITLE, PP_PLACEHOLDER.VERTICAL_TITLE}
# Placeholders that repeat on every slide: not the slide's content.
_CHROME_TYPES = {PP_PLACEHOLDER.DATE, PP_PLACEHOLDER.FOOTER, PP_PLACEHOLDER.SLIDE_NUMBER, PP_PLACEHOLDER.HEADER}
_MAX_GROUP_DEPTH = 32


def parse(data: bytes, limits: ParseLimits) -> ParsedDocument:
    package = safe_package(data, limits)  # zip bombs are refused before anything is inflated
    try:
        presentation = pptx.Presentation(package)
        slides = list(presentation.slides)
        core_title = meaningful_title(presentation.core_properties.title)
    except Exception as e:  # python-pptx raises KeyError, ValueError, lxml errors... on broken packages
        raise ParseError(ParseErrorCode.CORRUPT, f"The PPTX file could not be read: {type(e).__name__}: {e}")
    if len(slides) > limits.max_pages:
        raise ParseError(ParseErrorCode.TOO_LARGE, f"The presentation has {len(slides):,} slides; "
                                                   f"the limit is {limits.max_pages:,}.")
    titles = [_slide_title(slide) for slide in slides]
    title = core_title or (titles[0] if titles else "")
    blocks: list[Block] = []
    chars = 0
    for number, (slide, slide_title) in enumerate(zip(slides, titles), start=1):
        # The first slide's title, when it is the document's title, is not repeated as its section.
        section = (slide_title,) if slide_title and not (number == 1 and slide_title == title) else ()
        texts = list(_slide_texts(slide))
        if not texts and section:  # a title-only slide (a section divider): its title is its text
            blocks.append(Block(slide_title, number, ()))
        for block in texts:
            blocks.append(replace(block, page=number, section=section))
            chars += len(block.text)
        if chars > limits.max_chars:
            raise ParseError(ParseErrorCode.TOO_LARGE, f"The presentation holds more than {chars:,} characters "
                                                       f"of text; the limit is {limits.max_chars:,}.")
    if not blocks and title:  # a deck that is only its title slide
        blocks = [Block(title, 1 if slides else None, ())]
    if not blocks:
        raise ParseError(ParseErrorCode.EMPTY, "The PPTX file holds no text.")
    return ParsedDocument(Format.PPTX, title, blocks, pages=len(slides))


def _slide_title(slide) -> str:
    for shape in slide.placeholders:
        if shape.placeholder_format.type in _TITLE_TYPES and shape.has_text_frame:
            return " ".join(shape.text_frame.text.split())
    return ""


def _slide_texts(slide) -> Iterator[Block]:
    """The text of each shape (group members one by one), tables, then the speaker notes."""
    for shape in _shapes(slide.shapes, 0):
        if shape.is_placeholder and shape.placeholder_format.type in _TITLE_TYPES | _CHROME_TYPES:
            continue
        if shape.has_text_frame:
            block = Block(text) if (text := _frame_text(shape.text_frame)) else None
        elif getattr(shape, "has_table", False) and shape.has_table:
            block = _table(shape.table)
        else:
            continue
        if block is not None:
            yield block
    if slide.has_notes_slide:
        notes = slide.notes_slide.notes_text_frame
        text = _frame_text(notes) if notes is not None else ""
        if text:
            yield Block(text)


def _shapes(shapes: Iterable, depth: int) -> Iterator:
    for shape in shapes:
        if isinstance(shape, GroupShape):
            if depth < _MAX_GROUP_DEPTH:
                yield from _shapes(shape.shapes, depth + 1)
        else:
            yield shape


def _frame_text(frame) -> str:
    # One line a paragraph; python-pptx gives a line break inside a paragraph as a vertical tab.
    return _collapse("\n".join(p.text.replace("\v", "\n") for p in frame.paragraphs))


def _table(table) -> Block | None:
    """Its rows of cells (a merged cell once); its first row heads it when the table says so (PowerPoint's "Header
    Row" option, on in the tables it inserts)."""
    rows = [[" ".join(cell.text.split()) for cell in row.cells if not cell.is_spanned] for row in table.rows]
    return table_block(rows, 1 if table.first_row else 0)


def _collapse(text: str) -> str:
    return "\n".join(" ".join(line.split()) for line in text.split("\n") if line.strip())
