"""The semantic cache's second check: reject near-misses that a similarity score alone lets through.

Two questions can sit close in embedding space and still want different answers: another number ("top 5" vs
"top 10"), a negation ("can I" vs "can't I"), another name ("learn Python" vs "learn Java"). Each rule below
looks for one such difference; the late-interaction score (mean MaxSim over token vectors, both directions)
catches a single unmatched word that the pooled vector averages away.
"""
from __future__ import annotations

import re
import unicodedata

import numpy as np

from ..text import HAN, content_chars

_NUMBER = re.compile(r"\d+(?:[.,]\d+)*")
_NEGATION_EN = re.compile(
    r"n['’]t\b|\b(?:not|no|never|none|nothing|nobody|neither|nor|cannot|without|dont|doesnt|didnt|cant|wont|"
    r"isnt|arent|wasnt|werent|shouldnt|couldnt|wouldnt|havent|hasnt)\b")
# Chinese negation, less the common words that hold a negation character without negating (非常 "very", 无论
# "whatever", 不过 "but", 不错 "good", 无线 "wireless", 别人 "others", 未来 "future", 不同 "different" ...)
_NEGATION_ZH = re.compile(r"[不没無无非未别莫勿]")
_NOT_NEGATION_ZH = re.compile(r"非常|无论|無論|不过|不過|不错|不錯|无线|無線|别人|別人|未来|未來|莫名|不断|不斷|不同|"
                              r"不一样|不一樣|[区區特分告类類级級性识識个個差离離][别別]")
_ZH_DIGITS = {"零": 0, "〇": 0, "一": 1, "二": 2, "两": 2, "兩": 2, "三": 3, "四": 4, "五": 5, "六": 6, "七": 7,
              "八": 8, "九": 9}
_ZH_UNITS = {"十": 10, "百": 100, "千": 1000, "万": 10_000, "萬": 10_000, "亿": 100_000_000, "億": 100_000_000}
_ZH_NUMBER = re.compile(f"[{''.join(_ZH_DIGITS)}{''.join(_ZH_UNITS)}]+")
# words written with a numeral that count nothing ("一下" a moment, "一起" together, "万一" in case, "十分" very)
_NOT_NUMBER_ZH = re.compile(r"十分|一下|一起|一直|一样|一樣|一些|一点|一點|一定|万一|萬一|一般|统一|統一|唯一|之一|一切|一旦|"
                            r"一边|一邊|一会|一會|一律|一同|一致|一个|一個|一次性|第一时间")
# Two Chinese questions that differ only in their question words (text.QUESTION_WORDS_ZH) ask the same thing; one
# that differs in the rest (花呗 vs 借呗, 还款 vs 额度) asks about something else. 非常 ("very") is no term either.
_NOT_TERMS_ZH = frozenset("非常")
_WORD = re.compile(r"[^\W_]+(?:['’][^\W_]+)?")
_LATIN_WORD = re.compile(r"[A-Za-z]{2,}")
_SENTENCE_START = re.compile(r"(?:^|[.!?]\s+)([^\W_]+)")


def near_miss(a: str, b: str, a_tokens: np.ndarray | None = None, b_tokens: np.ndarray | None = None,
              late_threshold: float = 0.0, max_term_difference_zh: float = 1.0) -> str | None:
    """Why `b` must not be answered with `a`'s answer, or None if no rule objects. `max_term_difference_zh`: for
    Chinese questions, the largest share of their content characters that may be on one side only."""
    a_n, b_n = unicodedata.normalize("NFKC", a), unicodedata.normalize("NFKC", b)
    if sorted(_numbers(a_n)) != sorted(_numbers(b_n)):
        return "different numbers"
    if _negated(a_n) != _negated(b_n):
        return "negation differs"
    if max_term_difference_zh < 1.0 and (HAN.search(a_n) or HAN.search(b_n)):
        only, share = _term_difference(a_n, b_n)
        if share > max_term_difference_zh:
            return f"different terms ({only})"
    for names, other in ((_names(a_n), _covered(b_n)), (_names(b_n), _covered(a_n))):
        missing = sorted(n for n in names if not _is_covered(n, other))
        if missing:
            return f"different name ({missing[0]})"
    if a_tokens is not None and b_tokens is not None and late_threshold > 0:
        score = late_score(a_tokens, b_tokens)
        if score < late_threshold:
            return f"late-interaction score {score:.3f} below {late_threshold}"
    return None


def late_score(a: np.ndarray, b: np.ndarray) -> float:
    """Mean MaxSim in both directions between two sets of L2-normalised token vectors."""
    sims = a.astype(np.float32, copy=False) @ b.astype(np.float32, copy=False).T
    return float((sims.max(axis=1).mean() + sims.max(axis=0).mean()) / 2)


def _negated(text: str) -> bool:
    text = text.casefold()
    return bool(_NEGATION_EN.search(text) or _NEGATION_ZH.search(_NOT_NEGATION_ZH.sub("", text)))


def _numbers(text: str) -> list[str]:
    """Arabic numbers, and Chinese ones as their value ("三十五" and "35" are one number)."""
    found = [n.replace(",", "") for n in _NUMBER.findall(text)]  # "3,000" is 3000, as 三千 is
    for run in _ZH_NUMBER.findall(_NOT_NUMBER_ZH.sub(" ", text)):
        value = _zh_value(run)
        if value is not None:
            found.append(str(value))
    return found


def _zh_value(run: str) -> int | None:
    """三十五 -> 35, 两百 -> 200, 一万二千 -> 12000, 二〇二四 -> 2024, 两千五 -> 2500 (a digit right after a unit is
    the next place down); a lone unit (百 in 百度) is no number."""
    if all(c in _ZH_DIGITS for c in run):
        return int("".join(str(_ZH_DIGITS[c]) for c in run))
    if run in _ZH_UNITS:
        return 10 if run == "十" else None
    total = section = digit = 0
    last_unit = 0
    for c in run:
        if c in _ZH_DIGITS:
            digit = _ZH_DIGITS[c]
        elif _ZH_UNITS[c] >= 10_000:
            total += (section + digit) * _ZH_UNITS[c]
            section = digit = 0
            last_unit = _ZH_UNITS[c]
        else:
            section += (digit or 1) * _ZH_UNITS[c]
            digit = 0
            last_unit = _ZH_UNITS[c]
    if digit and run[-2:-1] and run[-2] in _ZH_UNITS and last_unit >= 100:
        digit *= last_unit // 10  # 两千五: the 五 is five hundred
    return total + section + digit


def _term_difference(a: str, b: str) -> tuple[str, float]:
    """The content characters (and Latin words) on one side only, and their share of both sides' content."""
    terms_a, terms_b = _zh_terms(a), _zh_terms(b)
    only = terms_a ^ terms_b
    total = len(terms_a) + len(terms_b)
    return "".join(sorted(only))[:12], (len(only) / total if total else 0.0)


def _zh_terms(text: str) -> set[str]:
    chars = {c for c in content_chars(text) if c not in _NOT_TERMS_ZH}
    return chars | {w.casefold() for w in _LATIN_WORD.findall(text)}


def _names(text: str) -> set[str]:
    """Capitalised words that do not start a sentence, and acronyms: the words most likely to be names."""
    starts = {m.start(1) for m in _SENTENCE_START.finditer(text)}
    names = set()
    for m in _WORD.finditer(text):
        word = m.group()
        if len(word) < 2 or not word[0].isupper() or m.start() in starts:
            continue
        names.add(word.casefold())
    return names


def _covered(text: str) -> set[str]:
    """Every word of `text`, case-folded, with its prefixes of 4 or more letters."""
    out = set()
    for word in (w.casefold() for w in _WORD.findall(text)):
        out.add(word)
        out.update(word[:n] for n in range(4, len(word)))
    return out


def _is_covered(name: str, covered: set[str]) -> bool:
    """The name, or the name less a short ending ("Indians" ~ "India"), is among the other text's words."""
    return any(name[:n] in covered for n in range(min(len(name), max(4, len(name) - 3)), len(name) + 1))
