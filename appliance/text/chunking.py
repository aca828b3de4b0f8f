"""Split a document into overlapping chunks along sentence boundaries.

Latin text is measured in words, CJK text in characters (it has no spaces). A sentence longer than a whole chunk
is cut inside, so no chunk exceeds the limit the encoder can see.
"""
from __future__ import annotations

import re

from .normalise import has_cjk

_SENTENCE_END = re.compile(r"(?<=[.!?。！？；;])\s+|(?<=[。！？；])")


def chunk_text(text: str, max_words: int, overlap_words: int, max_chars_cjk: int, overlap_chars_cjk: int) -> list[str]:
    text = text.strip()
    if not text:
        return []
    if has_cjk(text):
        units, join, limit, overlap = _cjk_sentences(text), "", max_chars_cjk, overlap_chars_cjk
    else:
        units, join, limit, overlap = _word_sentences(text), " ", max_words, overlap_words
    chunks: list[str] = []
    current: list[str] = []
    for sentence in units:
        for piece in _split_long(sentence, limit):
            if current and len(current) + len(piece) > limit:
                chunks.append(join.join(current))
                current = current[-overlap:] if overlap else []
                if len(current) + len(piece) > limit:
                    current = []
            current.extend(piece)
    if current:
        chunks.append(join.join(current))
    return chunks


def _word_sentences(text: str) -> list[list[str]]:
    return [s.split() for s in _SENTENCE_END.split(text) if s.strip()]


def _cjk_sentences(text: str) -> list[list[str]]:
    # Characters are the units; spaces between Latin words inside CJK text are kept as their own units.
    return [list(s.strip()) for s in _SENTENCE_END.split(text) if s.strip()]


def _split_long(units: list[str], limit: int) -> list[list[str]]:
    return [units[i:i + limit] for i in range(0, len(units), limit)] or [[]]
