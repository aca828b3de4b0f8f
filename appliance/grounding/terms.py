"""What a sentence claims and what a passage holds, as sets of terms.

English: words lower-cased and lightly stemmed (plural, -ed, -ing, -ly: "backups run nightly" meets "the nightly
backup runs"), stop words and answer filler out. Chinese: characters and character pairs. Numbers as digits
(`numbers.py`), and names (capitalised or mixed-case words inside a sentence): those are the facts that must appear
in a supporting passage, since changing one keeps nearly every other word.

Every pattern is linear: passages come from untrusted documents and answers from a model.
"""
from __future__ import annotations

import re
import unicodedata
from dataclasses import dataclass
from functools import lru_cache

from ..text import ENGLISH_STOP_WORDS, QUESTION_WORDS_ZH
from .numbers import WORD_NUMBERS, arabic, cjk_numbers

_HAN = "\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff"
_NUMBER_PATTERN = r"\d+(?:[.,]\d+)*(?::\d\d)?"
_WORD_PATTERN = rf"[^\W\d_{_HAN}][^\W_{_HAN}]*"  # starts with a letter; S3 and x86 are words
_TOKEN = re.compile(rf"(?P<num>{_NUMBER_PATTERN})|(?P<han>[{_HAN}]+)|(?P<word>{_WORD_PATTERN})")
_WORD = re.compile(_WORD_PATTERN)
_NUMBER = re.compile(rf"(?<![^\W_{_HAN}]){_NUMBER_PATTERN}")  # not inside a word (the 86 of x86)
_HAN_RUN = re.compile(f"[{_HAN}]+")
_FLAT = re.compile(r"[\W_]+")
SHORT_WORDS = 6  # up to this many words (or twice as many Chinese characters) a sentence is also matched whole
BIGRAM_WEIGHT = 0.5  # a character pair counts half: a paraphrase reorders Chinese, breaking pairs, not characters

# The BM25 tokenizer's English stop words, and what answers say around a claim without claiming anything.
STOP_WORDS = ENGLISH_STOP_WORDS | frozenset("""
also however therefore thus yes sure certainly okay ok please may might must shall answer question document
documents passage passages context provided according based following mentioned says said state states stated note
summary one st nd rd th etc per via go hope helps glad sorry course
""".split())
_CHINESE_STOP = QUESTION_WORDS_ZH | frozenset("之其而于以及等")
# How Chinese answers talk about themselves rather than the subject; cut before the characters are counted.
_CHINESE_FILLER = re.compile("根据|综上所述|总之|总的来说|文档|资料|答案|回答|问题|所述|提供的|如下|以下")


@lru_cache(maxsize=65536)
def stem(word: str) -> str:
    """A light English stemmer: enough that inflections of one word meet, no more (no dictionary, no Porter)."""
    if len(word) <= 3 or not word.isalpha():
        return word
    if word.endswith("ies") or word.endswith("ied"):
        word = word[:-3] + "y"
    elif word.endswith("sses"):
        word = word[:-2]
    elif word.endswith("s") and not word.endswith(("ss", "us", "is")):
        word = word[:-1]
    for suffix in ("ment", "ness", "ing", "ed", "ly"):
        if word.endswith(suffix) and len(word) - len(suffix) >= 3:
            word = word[:-len(suffix)]
            break
    if len(word) > 3 and word[-1] == word[-2] and word[-1] not in "lsz":  # running → runn → run
        word = word[:-1]
    if len(word) > 3 and word.endswith("e"):  # store, stored, storing → stor
        word = word[:-1]
    return word


def flat(text: str) -> str:
    """Lower case, punctuation to single spaces: where a short answer is looked for as a phrase."""
    return _FLAT.sub(" ", unicodedata.normalize("NFKC", text).lower()).strip()


@dataclass(slots=True, frozen=True)
class Terms:
    """An answer sentence's claims."""
    words: frozenset[str]  # stems, numbers, Chinese content characters
    bigrams: frozenset[str]  # pairs of adjacent Chinese content characters
    facts: frozenset[str]  # numbers and name stems: each must appear in a supporting passage
    phrase: str  # the whole sentence flattened, for short ones; "" otherwise

    @property
    def empty(self) -> bool:
        return not self.words and not self.bigrams

    @property
    def weight(self) -> float:
        return len(self.words) + BIGRAM_WEIGHT * len(self.bigrams)


@dataclass(slots=True, frozen=True)
class PassageTerms:
    """A passage (or one of its sentences) as the check looks things up in it."""
    words: frozenset[str]  # every stem, number (words and Chinese numerals as digits) and Chinese character
    bigrams: frozenset[str]  # every adjacent pair of Chinese characters
    flat: str  # for phrase look-ups
    compact: str  # flat without spaces, for Chinese phrases

    def covered(self, terms: Terms) -> float:
        if terms.empty:
            return 0.0
        hit = len(terms.words & self.words) + BIGRAM_WEIGHT * len(terms.bigrams & self.bigrams)
        return hit / terms.weight

    def holds_phrase(self, phrase: str) -> bool:
        if not phrase:
            return False
        if _has_han(phrase):
            return phrase.replace(" ", "") in self.compact
        return f" {phrase} " in f" {self.flat} "


def _has_han(text: str) -> bool:
    return any("\u3400" <= c <= "\u9fff" or "\uf900" <= c <= "\ufaff" for c in text)


def sentence_terms(text: str) -> Terms:
    """The content terms of one answer sentence (citations already stripped)."""
    text = _CHINESE_FILLER.sub(" ", unicodedata.normalize("NFKC", text))
    words: set[str] = set()
    bigrams: set[str] = set()
    facts: set[str] = set()
    latin = han = 0
    for m in _TOKEN.finditer(text):
        kind, token = m.lastgroup, m.group()
        if kind == "num":
            found = arabic(token)
            words.update(found)
            facts.update(found)
        elif kind == "han":
            han += len(token)
            _han_terms(token, words, bigrams, facts)
        else:
            latin += 1
            _word_terms(token, latin == 1, words, facts)
    short = latin + han / 2 <= SHORT_WORDS
    return Terms(frozenset(words), frozenset(bigrams), frozenset(facts), flat(text) if short else "")


def _word_terms(token: str, first: bool, words: set[str], facts: set[str]) -> None:
    lower = token.lower()
    if lower in WORD_NUMBERS:
        words.add(WORD_NUMBERS[lower])
        facts.add(WORD_NUMBERS[lower])
        return
    if lower in STOP_WORDS:
        return
    term = stem(lower)
    words.add(term)
    if _is_name(token, first):
        facts.add(term)


def _is_name(token: str, first: bool) -> bool:
    """Capitalised inside a sentence (Alice, Frankfurt), or an acronym or mixed-case word anywhere (AWS, S3,
    PostgreSQL). A capitalised first word is only capitalised: it still counts among the sentence's words."""
    if len(token) < 2 or token.islower():
        return False
    rest = token[1:]
    return not first or not rest.islower()


def _han_terms(run: str, words: set[str], bigrams: set[str], facts: set[str]) -> None:
    content = [c not in _CHINESE_STOP for c in run]
    words.update(c for c, keep in zip(run, content) if keep)
    bigrams.update(run[i:i + 2] for i in range(len(run) - 1) if content[i] and content[i + 1])
    found = cjk_numbers(run, strict=True)
    words.update(found)
    facts.update(found)


def passage_terms(text: str) -> PassageTerms:
    """Everything a passage holds, stop words included (a superset only makes a match easier, never wrong). Built
    from distinct tokens: a passage repeats its words, and this runs for every passage of every answer."""
    text = unicodedata.normalize("NFKC", text).lower()
    words: set[str] = set()
    for token in set(_WORD.findall(text)):
        words.add(WORD_NUMBERS.get(token) or stem(token))
    for token in set(_NUMBER.findall(text)):
        words.update(arabic(token))
    bigrams: set[str] = set()
    for run in set(_HAN_RUN.findall(text)):
        words.update(run)
        bigrams.update(run[i:i + 2] for i in range(len(run) - 1))
        words.update(cjk_numbers(run, strict=False))
    flattened = _FLAT.sub(" ", text).strip()
    return PassageTerms(frozenset(words), frozenset(bigrams), flattened, flattened.replace(" ", ""))


def ordered_terms(text: str) -> list[str]:
    """The text's content terms in order, repeats kept (Chinese: each content character, then the pair it starts):
    what the extractive answer ranks sentences by, with term frequency and proximity."""
    text = unicodedata.normalize("NFKC", text)
    out: list[str] = []
    for m in _TOKEN.finditer(text):
        kind, token = m.lastgroup, m.group()
        if kind == "num":
            out.extend(arabic(token))
        elif kind == "han":
            for i, c in enumerate(token):
                if c in _CHINESE_STOP:
                    continue
                out.append(c)
                if i + 1 < len(token) and token[i + 1] not in _CHINESE_STOP:
                    out.append(token[i:i + 2])
        else:
            lower = token.lower()
            if lower in WORD_NUMBERS:
                out.append(WORD_NUMBERS[lower])
            elif lower not in STOP_WORDS:
                out.append(stem(lower))
    return out
