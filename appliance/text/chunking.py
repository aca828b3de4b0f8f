"""Split a document into overlapping chunks along sentence boundaries, keeping each chunk inside one section.

Latin text is measured in words, CJK text in characters (it has no spaces). A sentence longer than a whole chunk
is cut inside, so no chunk exceeds the limit the encoder can see. Every chunk is also bounded in characters: a
text without spaces is one "word", and a chunk is tokenised whole each time an answer's prompt uses it, so a run
longer than the bound is cut into pieces of it.

Parsed files come as blocks with a page and a heading path: a chunk never spans two sections, and it ends at a
page break once it is at least half full (the boundary is near), so a citation's page is the chunk's page; a
short run of text at the foot of a page stays with what follows it (the chunk then spans two pages).

A table (a block with `header` lines) makes chunks of its own, whole rows one a line, each chunk beginning with the
table's heading lines: a question about one row finds that row, and the prompt shows it under its column names.
"""
from __future__ import annotations

import itertools
import re
from dataclasses import dataclass
from typing import Iterable, Protocol

from ..config import ChunkSettings
from .normalise import has_cjk

_SENTENCE_END = re.compile(r"(?<=[.!?。！？；;])\s+|(?<=[。！？；])")


class Placed(Protocol):
    """A piece of a document with where it is: a parsed block (parse.Block) or a whole plain text."""
    text: str
    page: int | None
    section: tuple[str, ...]
    header: int | None  # a table's heading lines (its first lines); None: not a table


@dataclass(slots=True, frozen=True)
class Chunk:
    text: str
    page: int | None = None  # the page it starts on (1-based), None where the document has no pages
    page_end: int | None = None  # the page it ends on, when it runs over a page break
    section: tuple[str, ...] = ()


@dataclass(slots=True, frozen=True)
class _Plain:
    text: str
    page: int | None = None
    section: tuple[str, ...] = ()
    header: int | None = None


def chunk_text(text: str, max_words: int, overlap_words: int, max_chars_cjk: int, overlap_chars_cjk: int,
               max_chars: int) -> list[str]:
    """A plain text's chunks (no pages or sections)."""
    limits = ChunkSettings(max_words, overlap_words, max_chars_cjk, overlap_chars_cjk, max_chars)
    return [c.text for c in chunk_blocks([_Plain(text)], limits)]


def chunk_blocks(blocks: Iterable[Placed], limits: ChunkSettings) -> list[Chunk]:
    """Chunks of consecutive blocks, section by section, in document order."""
    chunks: list[Chunk] = []
    for section, run in itertools.groupby(blocks, key=lambda b: tuple(b.section)):
        placed = [b for b in run if b.text.strip()]
        if placed:
            chunks.extend(_chunk_section(placed, section, limits))
    return chunks


def _chunk_section(placed: list[Placed], section: tuple[str, ...], limits: ChunkSettings) -> list[Chunk]:
    cjk = any(has_cjk(b.text) for b in placed)
    if cjk:
        join, limit, overlap = "", limits.max_chars_cjk, limits.overlap_chars_cjk
    else:
        join, limit, overlap = " ", limits.max_words, limits.overlap_words
    packer = _Packer(join, limit, overlap, limits.max_chars, section)
    for block in placed:
        if block.header is not None:
            packer.table(block.text.strip("\n").split("\n"), block.header, block.page, cjk)
            continue
        for sentence in _SENTENCE_END.split(block.text.strip()):
            if sentence.strip():
                units = list(sentence.strip()) if cjk else sentence.split()
                for piece in _split_long(units, limit, limits.max_chars, len(join)):
                    packer.add(piece, block.page)
    return packer.finish()


class _Packer:
    """Fills chunks with sentence pieces; carries `overlap` units into the next chunk, except across a page cut."""

    def __init__(self, join: str, limit: int, overlap: int, max_chars: int, section: tuple[str, ...]):
        self.join, self.sep, self.limit, self.overlap, self.max_chars = join, len(join), limit, overlap, max_chars
        self.section = section
        self.chunks: list[Chunk] = []
        self.current: list[str] = []
        self.size = 0  # characters of join.join(current)
        self.first_page: int | None = None
        self.last_page: int | None = None

    def add(self, piece: list[str], page: int | None) -> None:
        piece_size = _chars(piece, self.sep)
        if self.current and page != self.last_page and len(self.current) >= self.limit // 2:
            self._flush(carry=False)  # a page break near the end of a full-enough chunk: cut there
        elif self.current and self._overflows(piece, piece_size):
            self._flush(carry=True)
            if self._overflows(piece, piece_size):
                self.current, self.size = [], 0
        if not self.current:
            self.first_page = page
        self.size += (self.sep if self.current else 0) + piece_size
        self.current.extend(piece)
        self.last_page = page

    def table(self, lines: list[str], header: int, page: int | None, cjk: bool) -> None:
        """Whole rows under the table's heading lines, as many as fit a chunk; a row too long for one is cut. The
        heading is repeated only while it leaves room for rows (at most half a chunk)."""
        if self.current:
            self._flush(carry=False)
        size = (lambda text: len(text) + 1) if cjk else (lambda text: len(text.split()))  # + 1: its newline
        heading, rows = lines[:header], lines[header:]
        heading_size, heading_chars = sum(map(size, heading)), len("\n".join(heading))
        if heading_size > self.limit // 2 or heading_chars > self.max_chars // 2:
            heading, rows, heading_size, heading_chars = [], lines, 0, 0
        room, room_chars = self.limit - heading_size, self.max_chars - heading_chars - 1
        taken: list[str] = []
        taken_size, taken_chars = 0, -1  # units, and characters joined by newlines
        for row in (piece for line in rows for piece in _row_pieces(line, room, room_chars, cjk)):
            row_size = size(row)
            if taken and (taken_size + row_size > room or taken_chars + 1 + len(row) > room_chars):
                self.chunks.append(Chunk("\n".join(heading + taken), page, None, self.section))
                taken, taken_size, taken_chars = [], 0, -1
            taken.append(row)
            taken_size, taken_chars = taken_size + row_size, taken_chars + 1 + len(row)
        if taken:
            self.chunks.append(Chunk("\n".join(heading + taken), page, None, self.section))
        self.last_page = page

    def finish(self) -> list[Chunk]:
        if self.current:
            self._flush(carry=False)
        return self.chunks

    def _overflows(self, piece: list[str], piece_size: int) -> bool:
        return len(self.current) + len(piece) > self.limit or self.size + self.sep + piece_size > self.max_chars

    def _flush(self, carry: bool) -> None:
        end = self.last_page if self.last_page != self.first_page else None
        self.chunks.append(Chunk(self.join.join(self.current), self.first_page, end, self.section))
        self.current = self.current[-self.overlap:] if carry and self.overlap else []
        self.size = _chars(self.current, self.sep)
        self.first_page = self.last_page if self.current else None


def _split_long(units: list[str], limit: int, max_chars: int, sep: int) -> list[list[str]]:
    """The sentence in pieces of at most `limit` units and `max_chars` characters (a longer unit is cut)."""
    if any(len(u) > max_chars for u in units):
        units = [u[i:i + max_chars] for u in units for i in range(0, len(u), max_chars)]
    pieces: list[list[str]] = []
    current: list[str] = []
    size = 0
    for unit in units:
        if current and (len(current) >= limit or size + sep + len(unit) > max_chars):
            pieces.append(current)
            current, size = [], 0
        size += (sep if current else 0) + len(unit)
        current.append(unit)
    return pieces + [current] if current or not pieces else pieces


def _row_pieces(row: str, room: int, room_chars: int, cjk: bool) -> list[str]:
    """A table row, in pieces where it is longer than a chunk's room for rows."""
    units, room = (list(row), room - 1) if cjk else (row.split(), room)  # a CJK row's size counts its newline
    if len(units) <= room and len(row) <= room_chars:
        return [row]
    join = "" if cjk else " "
    return [join.join(piece) for piece in _split_long(units, room, room_chars, len(join))]


def _chars(units: list[str], sep: int) -> int:
    return sum(map(len, units)) + sep * max(0, len(units) - 1)
