"""Scoring answers against gold answers: pure functions over plain data, no services (`eval answers` and
bench/answers.py feed them what the engines answered).

English: the official SQuAD scorer's normalisation (lower case, ASCII punctuation deleted, the articles a/an/the
dropped, whitespace collapsed), token F1 and exact match, max over the gold answers. Chinese: CMRC 2018's scorer,
re-stated: punctuation and whitespace dropped, segments are single CJK characters and runs of other letters or
digits, F1 from the longest common *contiguous* run of segments, exact match on the normalised strings.

A generated answer is a sentence while a gold answer is a short span, so F1 stays low even for right answers;
`contains_gold` (a normalised gold answer appears inside the answer) is reported beside it, never instead of it.
"""
from __future__ import annotations

import math
import re
import string
import unicodedata
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

RIGHT_F1 = 0.5  # an answer is "right" for the grounding-flag rates at this F1, or when it contains a gold answer
FLAGGED = ("partly", "unsupported")  # grounding labels that flag an answer
_ARTICLES = re.compile(r"\b(a|an|the)\b")
_ASCII_PUNCTUATION = str.maketrans("", "", string.punctuation)


@dataclass(slots=True, frozen=True)
class Gold:
    answers: tuple[str, ...]
    answerable: bool = True
    relevant: frozenset[str] = frozenset()  # judged document ids (qrels)
    chinese: bool = False  # scored the CMRC way


@dataclass(slots=True, frozen=True)
class Answered:
    """What one system said to one question, whatever the system."""
    text: str  # as the client got it
    bare: str  # without citation marks: what is scored
    finish_reason: str
    abstained: bool  # refused, or said the documents do not cover the question
    sources: tuple[tuple[str, str], ...] = ()  # (document id, passage text), numbered from 1 as cited
    cited: tuple[int, ...] = ()
    grounding: str = "not_checked"  # the grounding check's label
    ttft_ms: float | None = None
    degraded: bool = False


@dataclass(slots=True, frozen=True)
class AnswerRow:
    index: int  # the question's (or conversation's) position in its file: the held-out half is index % 2
    followup: bool
    answerable: bool
    abstained: bool
    f1: float  # an unanswerable question scores 1 when abstained, else 0 (SQuAD 2.0's convention)
    em: bool
    contains_gold: bool
    cites: bool
    cited_right: bool  # a cited passage holds a gold answer or is a judged document
    top_right: bool  # the first source is a judged document
    grounding: str
    loop: bool
    degraded: bool
    not_covered: bool  # refused before generating (the relevance floor)
    ttft_ms: float | None


# ---------------------------------------------------------------- English (SQuAD)

def squad_tokens(text: str) -> list[str]:
    return _ARTICLES.sub(" ", text.lower().translate(_ASCII_PUNCTUATION)).split()


def squad_f1(prediction: str, gold: str) -> float:
    return _f1(squad_tokens(prediction), squad_tokens(gold))


def _f1(predicted: list[str], gold: list[str]) -> float:
    if not predicted or not gold:
        return float(predicted == gold)  # the official scorer: both empty is a match
    common = sum((Counter(predicted) & Counter(gold)).values())
    if not common:
        return 0.0
    precision, recall = common / len(predicted), common / len(gold)
    return 2 * precision * recall / (precision + recall)


# ---------------------------------------------------------------- Chinese (CMRC 2018)

def _is_cjk(char: str) -> bool:
    code = ord(char)
    return 0x3400 <= code <= 0x9FFF or 0xF900 <= code <= 0xFAFF or 0x20000 <= code <= 0x2FA1F


def _dropped(char: str) -> bool:
    """Whitespace, punctuation and the ASCII marks CMRC's scorer removes (+ = ~ ^ ` and the like)."""
    category = unicodedata.category(char)
    return char.isspace() or category.startswith("P") or category in ("Sm", "Sk")


def cmrc_segments(text: str) -> list[str]:
    """CJK characters (and other symbols: %, °) one by one, runs of other letters and digits as words; what
    `_dropped` removes ends a run."""
    segments, run = [], ""
    for char in text.lower():
        alone = _is_cjk(char) or unicodedata.category(char) in ("Sc", "So")
        if not alone and not _dropped(char):
            run += char
            continue
        if run:
            segments.append(run)
            run = ""
        if alone:
            segments.append(char)
    return segments + [run] if run else segments


def cmrc_normal(text: str) -> str:
    return "".join(c for c in text.lower() if not _dropped(c))


def cmrc_f1(prediction: str, gold: str) -> float:
    predicted, wanted = cmrc_segments(prediction), cmrc_segments(gold)
    common = _longest_common_run(predicted, wanted)
    if not common:
        return 0.0
    precision, recall = common / len(predicted), common / len(wanted)
    return 2 * precision * recall / (precision + recall)


def _longest_common_run(a: list[str], b: list[str]) -> int:
    best, previous = 0, [0] * (len(b) + 1)
    for x in a:
        current = [0] * (len(b) + 1)
        for j, y in enumerate(b, 1):
            if x == y:
                current[j] = previous[j - 1] + 1
                best = max(best, current[j])
        previous = current
    return best


# ---------------------------------------------------------------- one answer

def best_match(prediction: str, golds: Sequence[str], chinese: bool) -> tuple[float, bool, bool]:
    """(F1, exact match, contains a gold answer), each the max over the gold answers."""
    f1, em, contains = 0.0, False, False
    for gold in golds:
        if chinese:
            f1 = max(f1, cmrc_f1(prediction, gold))
            em = em or cmrc_normal(prediction) == cmrc_normal(gold)
        else:
            f1 = max(f1, squad_f1(prediction, gold))
            em = em or squad_tokens(prediction) == squad_tokens(gold)
        contains = contains or holds(prediction, gold, chinese)
    return f1, em, contains


def holds(text: str, gold: str, chinese: bool) -> bool:
    """Whether the normalised `gold` appears in the normalised `text` (whole tokens in English)."""
    if chinese:
        wanted = cmrc_normal(gold)
        return bool(wanted) and wanted in cmrc_normal(text)
    wanted = " ".join(squad_tokens(gold))
    return bool(wanted) and f" {wanted} " in f" {' '.join(squad_tokens(text))} "


def score(answered: Answered, gold: Gold, index: int, followup: bool = False) -> AnswerRow:
    if not gold.answerable:
        f1, em, contains = float(answered.abstained), answered.abstained, False
    elif answered.abstained:
        f1, em, contains = 0.0, False, False
    else:
        f1, em, contains = best_match(answered.bare, gold.answers, gold.chinese)
    cited = [answered.sources[n - 1] for n in answered.cited if 0 < n <= len(answered.sources)]
    cited_right = any(doc in gold.relevant or any(holds(text, g, gold.chinese) for g in gold.answers)
                      for doc, text in cited)
    top_right = bool(answered.sources) and answered.sources[0][0] in gold.relevant
    return AnswerRow(index, followup, gold.answerable, answered.abstained, f1, em, contains, bool(cited),
                     cited_right, top_right, answered.grounding, answered.finish_reason == "repetition",
                     answered.degraded, answered.finish_reason == "not_covered", answered.ttft_ms)


# ---------------------------------------------------------------- many answers

def summarise(rows: Sequence[AnswerRow], wall_s: float, concurrency: int) -> dict:
    """Every figure of a run; None where a figure has nothing to be computed on (no unanswerable question, say)."""
    answerable = [r for r in rows if r.answerable]
    answered = [r for r in answerable if not r.abstained]
    citing = [r for r in answered if r.cites]
    ttft = [r.ttft_ms for r in rows if r.ttft_ms is not None]
    followups = [r for r in rows if r.followup]
    return {
        "answers": len(rows), "answerable": len(answerable), "unanswerable": len(rows) - len(answerable),
        "f1": _mean(r.f1 for r in rows), "exact_match": _mean(r.em for r in rows),
        "answerable_f1": _mean(r.f1 for r in answerable), "answerable_exact_match": _mean(r.em for r in answerable),
        "contains_gold": _mean(r.contains_gold for r in answerable),
        "followup_f1": _mean(r.f1 for r in followups) if followups else None,
        **abstention(rows),
        "citation_accuracy": _mean(r.cited_right for r in citing) if citing else None,
        "share_citing": _mean(r.cites for r in answered), "top_source_accuracy": _mean(r.top_right for r in answerable),
        "supported_share": _mean(r.grounding == "supported" for r in rows if not r.abstained),
        "grounding_labels": dict(Counter(r.grounding for r in rows if not r.abstained)),
        **flag_rates(rows),
        "loops": _mean(r.loop for r in rows), "degraded": _mean(r.degraded for r in rows),
        "not_covered": _mean(r.not_covered for r in rows),
        "answers_per_min": round(len(rows) / (wall_s / 60), 2) if wall_s > 0 else 0.0, "concurrency": concurrency,
        "wall_s": round(wall_s, 1), "ttft_p50_ms": _percentile(ttft, 50), "ttft_p99_ms": _percentile(ttft, 99),
        "halves": {"even": half(rows, 0), "odd": half(rows, 1)},
    }


def abstention(rows: Sequence[AnswerRow]) -> dict:
    abstained = [r for r in rows if r.abstained]
    unanswerable = [r for r in rows if not r.answerable]
    right = sum(1 for r in abstained if not r.answerable)
    return {"abstained": _mean(r.abstained for r in rows),
            "abstain_precision": round(right / len(abstained), 4) if abstained else None,
            "abstain_recall": round(right / len(unanswerable), 4) if unanswerable else None}


def flag_rates(rows: Sequence[AnswerRow]) -> dict:
    """How often the grounding check flags (partly or unsupported) wrong answers and right ones: answerable,
    answered and checked; right = F1 >= RIGHT_F1 or the answer contains a gold answer, wrong = the rest."""
    checked = [r for r in rows if r.answerable and not r.abstained and r.grounding != "not_checked"]
    right = [r for r in checked if r.f1 >= RIGHT_F1 or r.contains_gold]
    wrong = [r for r in checked if not (r.f1 >= RIGHT_F1 or r.contains_gold)]
    return {"flagged_wrong": _mean(r.grounding in FLAGGED for r in wrong) if wrong else None,
            "flagged_right": _mean(r.grounding in FLAGGED for r in right) if right else None,
            "checked_right": len(right), "checked_wrong": len(wrong)}


def half(rows: Sequence[AnswerRow], parity: int) -> dict:
    """The headline figures on the questions (conversations) of one parity of their index in the file."""
    part = [r for r in rows if r.index % 2 == parity]
    answerable = [r for r in part if r.answerable]
    citing = [r for r in answerable if r.cites and not r.abstained]
    followups = [r for r in part if r.followup]
    return {"answers": len(part), "f1": _mean(r.f1 for r in part), "answerable_f1": _mean(r.f1 for r in answerable),
            "contains_gold": _mean(r.contains_gold for r in answerable),
            "followup_f1": _mean(r.f1 for r in followups) if followups else None, **abstention(part),
            "citation_accuracy": _mean(r.cited_right for r in citing) if citing else None}


def sample(answerable: Sequence[bool], limit: int | None) -> list[int]:
    """`limit` indices spread evenly over the file, answerable and unanswerable questions in their shares of it
    (each class's quota rounded, the remainder to the larger class), in file order; all when no limit."""
    n = len(answerable)
    if limit is None or limit >= n:
        return list(range(n))
    classes = [[i for i, a in enumerate(answerable) if a == kind] for kind in (True, False)]
    classes = sorted((c for c in classes if c), key=len, reverse=True)
    quotas = [round(limit * len(c) / n) for c in classes]
    quotas[0] += limit - sum(quotas)
    chosen = [c[math.floor((k + 0.5) * len(c) / q)] for c, q in zip(classes, quotas) for k in range(q)]
    return sorted(chosen)


def _mean(values) -> float:
    values = [float(v) for v in values]
    return round(float(np.mean(values)), 4) if values else 0.0


def _percentile(values: list[float], q: float) -> float | None:
    return round(float(np.percentile(values, q)), 1) if values else None
