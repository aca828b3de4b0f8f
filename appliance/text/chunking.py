"""Split a document into overlapping chunks along sentence boundaries.

Latin text is measured in words, CJK text in characters (it has no spaces). A sentence longer than a whole chunk
is cut inside, so no chunk exceeds the limit the encoder can see. Every chunk is also bounded in characters: a
text without spaces is one "word", and a chunk is tokenised whole each time an answer's prompt uses it, so a run
longer than the bound is cut into pieces of it.
"""
from __future__ import annotations

import re

from .normalise import has_cjk

_SENTENCE_END = re.compile(r"(?<=[.!?。！？；;])\s+|(?<=[。！？；])")


def chunk_text(text: str, max_words: int, overlap_words: int, max_chars_cjk: int, overlap_chars_cjk: int,
               max_chars: int) -> list[str]:
    text = text.strip()
    if not text:
        return []
    if has_cjk(text):
        units, join, limit, overlap = _cjk_sentences(text), "", max_chars_cjk, overlap_chars_cjk
    else:
        units, join, limit, overlap = _word_sentences(text), " ", max_words, overlap_words
    sep = len(join)
    chunks: list[str] = []
    current: list[str] = []
    size = 0  # characters of join.join(current)
    for sentence in units:
        for piece in _split_long(sentence, limit, max_chars, sep):
            piece_size = _chars(piece, sep)
            if current and (len(current) + len(piece) > limit or size + sep + piece_size > max_chars):
                chunks.append(join.join(current))
                current = current[-overlap:] if overlap else []
                size = _chars(current, sep)
                if len(current) + len(piece) > limit or size + sep + piece_size > max_chars:
                    current, size = [], 0
            size += (sep if current else 0) + piece_size
            current.extend(piece)
    if current:
        chunks.append(join.join(current))
    return chunks


def _word_sentences(text: str) -> list[list[str]]:
    return [s.split() for s in _SENTENCE_END.split(text) if s.strip()]


def _cjk_sentences(text: str) -> list[list[str]]:
    # Characters are the units; spaces between Latin words inside CJK text are kept as their own units.
    return [list(s.strip()) for s in _SENTENCE_END.split(text) if s.strip()]


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


def _chars(units: list[str], sep: int) -> int:
    return sum(map(len, units)) + sep * max(0, len(units) - 1)
