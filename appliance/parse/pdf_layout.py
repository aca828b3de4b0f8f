"""PDF text lines -> paragraphs: page furniture dropped, lines grouped by spacing, size and indentation, wrapped
lines joined (hyphenation undone where the document itself says so, no spaces inserted between CJK characters)."""
from __future__ import annotations

import re
import statistics
from collections import Counter, defaultdict
from dataclasses import dataclass
from itertools import groupby, pairwise

from .text import is_no_space_char

_PARAGRAPH_GAP = 1.25  # a baseline step this many line pitches past the usual one starts a paragraph
_SAME_SIZE = 0.08
_SHORT_LINE = 0.25  # a line ending this share of the column width early ends its paragraph (with a full stop)
_SENTENCE_END = tuple(".!?:;\u3002\uff01\uff1f\uff1a\uff1b\u201d\")\u300d")
_LIST_MARKER = re.compile(r"^([\u2022\u25aa\u25cf\u2013\u25e6*\-]|\(?\d{1,3}[.)]|\(?[a-z][.)])\s")
# Possessive `\s*+` and a word start before `$`: a long line of blanks or letters no longer costs quadratic time.
_PAGE_NUMBER = re.compile(r"^(page\s*+)?[-\u2013\u2014(\[]?\s*+\d{1,4}\s*+[-\u2013\u2014)\]]?(\s*+(of|/)\s*+\d{1,4})?$",
                          re.I)
_WORD = re.compile(r"[^\W\d_]+(?:-[^\W\d_]+)*")
_TRAILING_WORD, _LEADING_WORD = re.compile(r"(?<![^\W\d_])[^\W\d_]+$"), re.compile(r"^[^\W\d_]+")
_EDGE_LINES = 2  # lines at the top and at the bottom of a page that may be running heads, footers, page numbers
_NO_SPACE_AFTER = ("-", "\u2010", "\u2013", "\u2014", "/")


@dataclass(slots=True, frozen=True)
class Line:
    text: str
    page: int  # 1-based
    size: float  # font size in points, page scaling included
    baseline: float  # y, upwards
    left: float
    right: float
    hyphen: bool  # pdfium took the hyphen ending it for a hyphenation (the hyphen is not in `text`)


@dataclass(slots=True, frozen=True)
class Paragraph:
    text: str
    page: int
    size: float
    baseline: float  # of its first line
    lines: int


def assemble_paragraphs(lines: list[Line]) -> list[Paragraph]:
    lines = _drop_page_furniture(lines)
    pitches = _pitches(lines)
    vocabulary = _Vocabulary(lines)
    return [_paragraph(group, vocabulary) for group in _group(lines, pitches)]


def _drop_page_furniture(lines: list[Line]) -> list[Line]:
    """Running heads and footers (the same text, numbers aside, at a page edge on most pages) and page numbers."""
    pages = [list(page) for _, page in groupby(lines, key=lambda line: line.page)]
    edges = [_edge_lines(page) for page in pages]
    seen = Counter(key for edge in edges for key in {_furniture_key(line) for line in edge})
    repeated = {key for key, n in seen.items() if len(pages) >= 3 and n >= max(3, len(pages) / 2)}
    drop = {id(line) for edge in edges for line in edge
            if _furniture_key(line) in repeated or _PAGE_NUMBER.match(line.text)}
    return [line for line in lines if id(line) not in drop]


def _edge_lines(page: list[Line]) -> list[Line]:
    """The line or two at the top and at the bottom of a page that stand apart from the rest (a wide gap)."""
    if len(page) == 1:
        return page
    edge: list[Line] = []
    for ordered in (page, page[::-1]):
        for k in range(1, min(_EDGE_LINES, len(ordered) - 1) + 1):
            if _apart(ordered[k - 1], ordered[k]):  # the first k lines stand close together, apart from the rest
                edge.extend(ordered[:k])
                break
    return edge


def _apart(a: Line, b: Line) -> bool:
    return abs(a.baseline - b.baseline) > 1.8 * max(a.size, b.size)


def _furniture_key(line: Line) -> str:
    return re.sub(r"\d+", "#", "".join(line.text.casefold().split()))


def _pitches(lines: list[Line]) -> dict[int, float]:
    """The usual baseline step between lines of one paragraph, per font size (in half points)."""
    steps: defaultdict[int, Counter[float]] = defaultdict(Counter)
    for a, b in pairwise(lines):
        step = a.baseline - b.baseline
        if a.page == b.page and _same_size(a.size, b.size) and 0.8 * a.size < step < 3 * a.size:
            steps[_size_key(a.size)][round(step * 2) / 2] += 1
    return {size: counts.most_common(1)[0][0] for size, counts in steps.items()}


def _size_key(size: float) -> int:
    return round(size * 2)


def _same_size(a: float, b: float) -> bool:
    return abs(a - b) <= _SAME_SIZE * max(a, b)


def _group(lines: list[Line], pitches: dict[int, float]) -> list[list[Line]]:
    groups: list[list[Line]] = []
    left = right = 0.0  # the current group's column
    for line in lines:
        if groups and not _starts_paragraph(groups[-1][-1], line, pitches, min(left, line.left),
                                            max(right, line.right)):
            groups[-1].append(line)
            left, right = min(left, line.left), max(right, line.right)
        else:
            groups.append([line])
            left, right = line.left, line.right
    return groups


def _starts_paragraph(a: Line, b: Line, pitches: dict[int, float], left: float, right: float) -> bool:
    """Whether line b, after line a, starts a paragraph; left and right bound the paragraph's lines so far and b."""
    if b.page != a.page or not _same_size(a.size, b.size):
        return True
    step = a.baseline - b.baseline
    if abs(step) < 0.3 * a.size:
        return False  # the same visual line, cut by a wide gap
    pitch = pitches.get(_size_key(a.size), 1.2 * a.size)
    if step < 0 or step > _PARAGRAPH_GAP * pitch:
        return True  # up the page (a new column or box), or a gap
    short = a.right < right - _SHORT_LINE * (right - left)
    ends = a.text.endswith(_SENTENCE_END) and not a.hyphen
    if b.left > a.left + 0.8 * b.size and (short or ends):
        return True  # first-line indent
    if _LIST_MARKER.match(b.text) and b.left <= a.left + 0.5 * b.size:
        return True
    return short and ends


def _paragraph(group: list[Line], vocabulary: _Vocabulary) -> Paragraph:
    parts = [group[0].text]
    for a, b in pairwise(group):
        parts += [_glue(parts[-1], a, b, vocabulary), b.text]
    text = " ".join("".join(parts).split())
    return Paragraph(text, group[0].page, statistics.median(line.size for line in group), group[0].baseline,
                     len(group))


def _glue(text: str, a: Line, b: Line, vocabulary: _Vocabulary) -> str:
    """What goes between line a (`text`) and the next: a space, nothing, or the hyphen pdfium took out."""
    if a.hyphen:
        left, right = _TRAILING_WORD.search(text), _LEADING_WORD.match(b.text)
        if left and text[:left.start()].endswith("-"):
            return "-"  # "dense-core-" + "vesicle": the next link of a hyphenated compound
        return vocabulary.hyphen(left.group() if left else "", right.group() if right else "")
    if not text or not b.text or is_no_space_char(text[-1]) or is_no_space_char(b.text[0]):
        return ""
    if text.endswith(_NO_SPACE_AFTER) and len(text) > 1 and not text[-2].isspace():
        return ""  # "anti-IL-" + "2", "0.6%-" + "15.1%": a compound or range cut at its hyphen
    return " "


class _Vocabulary:
    """The document's own words, to tell a hyphenation ("inflam-mation") from a compound ("three-dimensional")."""

    def __init__(self, lines: list[Line]):
        self.words: set[str] = set()
        self.compounds: set[str] = set()
        if not any(line.hyphen for line in lines):
            return  # nothing to decide
        for n, line in enumerate(lines):
            tokens = _WORD.findall(line.text)
            if line.hyphen:
                tokens = tokens[:-1]  # the halves around a line-end hyphen are no evidence
            if n and lines[n - 1].hyphen:
                tokens = tokens[1:]
            for token in tokens:
                token = token.casefold()
                if "-" in token:
                    self.compounds.add(token)
                self.words.update(token.split("-"))

    def hyphen(self, left: str, right: str) -> str:
        """What goes back between the halves: "-", or nothing (a hyphenation)."""
        if not (left and right and left[-1].islower() and right[0].islower()):
            return "-"
        left, right = left.casefold(), right.casefold()
        if left + right in self.words:
            return ""
        if f"{left}-{right}" in self.compounds:
            return "-"
        if (len(left) >= 3 and left in self.words) or (len(right) >= 3 and right in self.words):
            # "standard-dose", "low-expression": a word of the text on either side; a hyphenation leaves pieces
            # that are not words ("inflam-mation"). Joining a real compound costs as much as keeping a soft hyphen.
            return "-"
        return ""
