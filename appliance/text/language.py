"""Which language a text is in, as far as retrieval cares: Chinese, English (any Latin-script text), or both.

A partition's language picks its encoder (`auto` is decided from its first documents); a question's picks the
encoder its semantic-cache vector comes from and which partitions' lists lead the fusion. Counting scripts is
enough for that and costs microseconds: a CJK character carries about as much as a Latin word of ~3 letters.
"""
from __future__ import annotations

import re
from collections.abc import Iterable
from typing import Literal

from .normalise import CJK_CHARS

Language = Literal["en", "zh", "multi"]
LANGUAGES: tuple[str, ...] = ("en", "zh", "multi")
AUTO = "auto"  # decided from the first documents a partition gets

_CJK = re.compile(f"[{CJK_CHARS}]")
_LATIN = re.compile(r"[A-Za-z\u00c0-\u024f]")
LETTERS_PER_CJK = 3.0
ZH_AT_LEAST = 0.6  # share of CJK (in Latin-word units) from which a text is Chinese
EN_AT_MOST = 0.1  # and up to which it is English; in between it is both
SAMPLE_CHARS = 20_000  # what detection reads of a partition's first documents

HAN = re.compile(r"[\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff]")  # Chinese characters (ideographs) only
# What a Chinese question is made of besides what it asks about: question words, pronouns, particles, light verbs.
# Two questions that differ only in these (怎么/如何, 我的/你们) ask the same thing.
QUESTION_WORDS_ZH = frozenset("的了吗呢吧啊呀么嘛哦哪那这个些们我你您他她它是在有和与或及就都也还又再要会能可以想请问"
                              "怎样如何为什啥谁几多少时候何里去来到把被给对让从用得地着过很太最更")


def content_chars(text: str) -> list[str]:
    """The text's distinct Chinese characters in order of first use, less the question words."""
    return [c for c in dict.fromkeys(HAN.findall(text)) if c not in QUESTION_WORDS_ZH]


def detect_language(texts: Iterable[str], sample_chars: int = SAMPLE_CHARS) -> Language:
    """"zh", "en" (any Latin-script text, code included), or "multi" for text in both, or in neither (numbers,
    symbols: either encoder will do); reads at most `sample_chars`."""
    cjk = latin = 0
    budget = sample_chars
    for text in texts:
        part = text[:budget]
        cjk += len(_CJK.findall(part))
        latin += len(_LATIN.findall(part))
        budget -= len(part)
        if budget <= 0:
            break
    if not cjk:
        return "en" if latin else "multi"  # Latin letters alone are English's encoder's; no letters: either
    units = cjk + latin / LETTERS_PER_CJK
    share = cjk / units
    if share >= ZH_AT_LEAST:
        return "zh"
    if share <= EN_AT_MOST:
        return "en"
    return "multi"


def question_language(question: str) -> Language:
    """A question's language; one without CJK counts as English, letters or not ("2+2?", "GDPR?")."""
    if not _CJK.search(question):
        return "en"
    return detect_language([question])
