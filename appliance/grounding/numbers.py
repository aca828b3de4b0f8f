"""Numbers as the check compares them: "2,000", "2000" and "两千" are one number; "02:00" is the hour 2.

A wrong number is the commonest way an answer that reads well is wrong, and the passage and the answer often write
it differently (digits in one, words or Chinese numerals in the other), so both sides are brought to plain digits.
"""
from __future__ import annotations

import re

_THOUSANDS = re.compile(r"\d{1,3}(?:,\d{3})+(?:\.\d+)?")
_CJK_DIGITS = {"零": 0, "〇": 0, "一": 1, "二": 2, "两": 2, "三": 3, "四": 4, "五": 5, "六": 6, "七": 7, "八": 8,
               "九": 9}
_CJK_UNITS = {"十": 10, "百": 100, "千": 1000}
_CJK_BIG = {"万": 10_000, "亿": 100_000_000}
CJK_NUMERAL = re.compile("[" + "".join([*_CJK_DIGITS, *_CJK_UNITS, *_CJK_BIG]) + "]+")
# What follows a Chinese numeral that is a quantity rather than part of a word (一起, 统一, 万一 are not numbers).
CJK_MEASURES = frozenset("点时年月日号天周个次份分秒岁倍层条项名位人家台张页章节部元块%")
_NOT_NUMBERS = frozenset({"一", "十分", "万一", "一一"})  # "one/a", "very", "in case", "one by one"
MAX_CJK_RUN = 20  # longer runs of numerals are not a quantity anyone writes

# English number words as digits; "one" is left out: far more often a pronoun than a count.
WORD_NUMBERS = {w: str(i) for i, w in enumerate(
    "zero _ two three four five six seven eight nine ten eleven twelve".split()) if w != "_"}
WORD_NUMBERS.update({w: str(10 * i) for i, w in enumerate(
    "twenty thirty forty fifty sixty seventy eighty ninety".split(), 2)})


def arabic(token: str) -> list[str]:
    """A run of digits (with . , : inside) as the numbers it writes: "2,000" → 2000, "1,2" → 1 and 2,
    "02:30" → 2 and 30 ("02:00" → 2 alone), "2.50" → 2.5."""
    hour, _, minutes = token.partition(":")
    if _THOUSANDS.fullmatch(hour):
        parts = [hour.replace(",", "")]
    else:
        parts = hour.split(",")
    out = [_plain(p) for p in parts if p]
    if minutes and minutes.strip("0"):
        out.append(_plain(minutes))
    return out


def _plain(number: str) -> str:
    whole, dot, fraction = number.partition(".")
    if dot and "." in fraction:  # a version or a date (3.11.2): compared as written
        return number
    whole = whole.lstrip("0") or "0"
    fraction = fraction.rstrip("0")
    return f"{whole}.{fraction}" if fraction else whole


def cjk_number(run: str) -> str | None:
    """A run of Chinese numerals in digits: 两 → 2, 三十 → 30, 一九九八 → 1998, 一万二千 → 12000."""
    if not run or len(run) > MAX_CJK_RUN:
        return None
    if len(run) > 1 and all(c in _CJK_DIGITS for c in run):  # read digit by digit, as years are
        return "".join(str(_CJK_DIGITS[c]) for c in run)
    total = section = digit = 0
    for c in run:
        if c in _CJK_DIGITS:
            digit = _CJK_DIGITS[c]
        elif c in _CJK_UNITS:
            section += (digit or 1) * _CJK_UNITS[c]
            digit = 0
        else:
            total += (section + digit or 1) * _CJK_BIG[c]
            section = digit = 0
    return str(total + section + digit)


def cjk_numbers(run: str, strict: bool) -> list[str]:
    """The numbers in a run of Chinese characters. `strict` (an answer's claims) keeps only numerals followed by a
    measure word, so that 统一 or 一个 claim nothing; the passage side takes every numeral, which can only make the
    check more lenient."""
    found = []
    for m in CJK_NUMERAL.finditer(run):
        numeral = m.group()
        after = run[m.end():m.end() + 1]
        if strict and (numeral in _NOT_NUMBERS or after not in CJK_MEASURES):
            continue
        if (value := cjk_number(numeral)) is not None:
            found.append(value)
    return found
