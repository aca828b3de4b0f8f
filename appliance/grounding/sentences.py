"""Answers as sentences, and the [n] citation marks in them.

Models cite as "[1]", "[2][3]" or "[1, 3]", before or after the full stop; a mark right after a sentence's end
belongs to that sentence. Spans into the original text are kept so that citations can be put back in place.
"""
from __future__ import annotations

import re
from dataclasses import dataclass

# One citation mark: "[1]", "[1, 3]" ("[1000]" and "[a]" are not). _REMOVABLE takes the space before it too.
CITATION = re.compile(r"\[(\d{1,3}(?:\s*,\s*\d{1,3})*)\]")
_REMOVABLE = re.compile(r" ?\[(\d{1,3}(?:\s*,\s*\d{1,3})*)\]")
_CITES_AFTER = re.compile(r"(?:[ \t]*\[\d{1,3}(?:\s*,\s*\d{1,3})*\])+")
_LINE = re.compile(r"[^\n]+")
_BULLET = re.compile(r"[ \t]*(?:[-*•·+]|\d{1,3}[.)]|#{1,6})[ \t]+")
# One mark per run ("?!" ends once, at its last mark): a lookahead after a repeated class would backtrack.
_END = re.compile(r"[.!?](?![.!?])(?=\s|\[\d|$)|[。！？；]+|;(?=\s)")
_ABBREVIATIONS = frozenset({"e.g", "i.e", "vs", "mr", "mrs", "ms", "dr", "no", "fig", "approx", "cf", "al"})
_HAN_CHAR = re.compile("[\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff]")
TRAILING_PUNCTUATION = ".!?。！？；;:,，"


@dataclass(slots=True, frozen=True)
class Piece:
    """One sentence of an answer: where it is in the original text, its text without citations, what it cites."""
    start: int
    end: int
    text: str
    cited: tuple[int, ...]


def cited_numbers(text: str) -> list[int]:
    """The passage numbers the text cites, each once, in order of first citation."""
    seen: dict[int, None] = {}
    for m in CITATION.finditer(text):
        for part in m.group(1).split(","):
            seen.setdefault(int(part), None)
    return list(seen)


def strip_citations(text: str) -> str:
    return _REMOVABLE.sub("", text)


def validate_citations(answer: str, n_passages: int) -> tuple[str, tuple[int, ...]]:
    """Citation marks naming no passage (outside 1..n_passages) removed; a group keeps its valid numbers
    ("[1, 9]" → "[1]"). Returns the text and the numbers removed, in order. Other brackets are left alone."""
    removed: list[int] = []

    def keep_valid(m: re.Match) -> str:
        numbers = [int(p) for p in m.group(1).split(",")]
        valid = [n for n in numbers if 1 <= n <= n_passages]
        removed.extend(n for n in numbers if not 1 <= n <= n_passages)
        if len(valid) == len(numbers):
            return m.group()
        space = " " if m.group().startswith(" ") else ""
        if not valid:  # its space stays when a kept mark follows: "them [0][2]" → "them [2]"
            return space if m.string.startswith("[", m.end()) else ""
        return f"{space}[{', '.join(map(str, valid))}]"

    return _REMOVABLE.sub(keep_valid, answer), tuple(removed)


def split_sentences(text: str) -> list[Piece]:
    """Sentences at . ! ? 。！？； and line ends; list bullets and headings marks dropped; a citation right after
    a sentence's end is kept with that sentence. Empty pieces are left out."""
    pieces: list[Piece] = []
    for line in _LINE.finditer(text):
        start, stop = line.start(), line.end()
        if bullet := _BULLET.match(text, start, stop):
            start = bullet.end()
        for m in _END.finditer(text, start, stop):
            if _abbreviation(text, start, m.start()):
                continue
            end = m.end()
            if cites := _CITES_AFTER.match(text, end, stop):
                end = cites.end()
            _add(pieces, text, start, end)
            start = end
        _add(pieces, text, start, stop)
    return pieces


def _abbreviation(text: str, start: int, dot: int) -> bool:
    """A full stop that ends "e.g", "U.S", "Dr" or an initial ("J. Smith"), not the sentence. Only the last few
    characters are read: the check stays constant-time however long the sentence."""
    if text[dot] != ".":
        return False
    tail = text[max(start, dot - 8):dot].rsplit(None, 1)
    word = tail[-1].lower() if tail else ""
    if word in _ABBREVIATIONS or ("." in word and word.replace(".", "").isalpha()):
        return True
    return len(word) == 1 and word.isalpha() and dot - start > 1


def _add(pieces: list[Piece], text: str, start: int, end: int) -> None:
    raw = text[start:end]
    clean = strip_citations(raw).strip()
    if clean.strip(TRAILING_PUNCTUATION + " \t"):
        pieces.append(Piece(start, end, clean, tuple(cited_numbers(raw))))


def citation_mark(text: str, at: int, n: int) -> str:
    """" [n]" after English, "[n]" after Chinese, which puts no space between words."""
    return f"[{n}]" if at and _HAN_CHAR.match(text, at - 1) else f" [{n}]"


def insertion_point(text: str, piece: Piece) -> int:
    """Where a citation goes in a sentence: before its closing punctuation (and trailing spaces)."""
    end = piece.end
    while end > piece.start and text[end - 1].isspace():
        end -= 1
    while end > piece.start and text[end - 1] in TRAILING_PUNCTUATION:
        end -= 1
    return end
