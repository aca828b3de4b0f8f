"""Answers made of the passages' own sentences: without a model (`extractive_answer`, for degraded or overloaded
boxes), or in place of an answer the passages do not support (`supporting_quotes`).

Sentences are ranked against the question by BM25 over the given passages' sentences (rare terms weigh more; a
long sentence does not win by length alone), times a proximity bonus: the answer to a SQuAD- or CMRC-like question
sits in the one sentence that holds the question's terms close together.
"""
from __future__ import annotations

import math
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass

from .labels import ExtractiveAnswer, Grounding
from .sentences import split_sentences
from .terms import PassageTerms, Terms, ordered_terms, passage_terms, sentence_terms

K1, B = 1.2, 0.5  # BM25 over sentences; b halved: sentences vary less in length than documents
PROXIMITY_WEIGHT = 0.5  # up to +50% for the question's terms side by side
MIN_TERMS = 3  # shorter units are headings and fragments, not answers (used only when nothing longer matches)
RELATIVE_TO_BEST = 0.5  # a sentence scoring under half the best one only shares a common word with the question
QUOTE_AT = 0.3  # share of an answer sentence's terms a passage sentence must hold to be quoted for it
PREFERRED_BONUS = 0.05  # the passages the check found supporting the sentence win near ties
_CJK_END = "。！？；"


@dataclass(slots=True, frozen=True)
class Unit:
    n: int  # its passage's number, from 1
    order: int  # its place in the passage
    text: str
    terms: tuple[str, ...]  # `ordered_terms`: repeats kept, in order


def units(passages: Sequence[str]) -> list[Unit]:
    return [Unit(n, order, piece.text, tuple(ordered_terms(piece.text)))
            for n, passage in enumerate(passages, 1) for order, piece in enumerate(split_sentences(passage))]


def extractive_answer(question: str, passages: Sequence[str], max_sentences: int = 2,
                      max_chars: int = 600) -> ExtractiveAnswer:
    """The `max_sentences` sentences that best answer `question`, each followed by its [n], in passage order, in
    at most about `max_chars`; ("", ()) when no sentence shares a term with the question."""
    chosen = rank(question, units(passages))[:max_sentences]
    return _compose(chosen, max_chars)


def rank(question: str, pool: list[Unit]) -> list[Unit]:
    """`pool`'s units sharing a term with the question, best first, down to half the best one's score."""
    query = set(ordered_terms(question))
    if not query or not pool:
        return []
    df = Counter(t for u in pool for t in query.intersection(u.terms))
    idf = {t: math.log(1 + (len(pool) - f + 0.5) / (f + 0.5)) for t, f in df.items()}
    avg_len = sum(len(u.terms) for u in pool) / len(pool) or 1.0
    scored = [(score, u) for u in pool if (score := _score(u, idf, avg_len)) > 0]
    full = [pair for pair in scored if len(pair[1].terms) >= MIN_TERMS] or scored
    full.sort(key=lambda pair: (-pair[0], pair[1].n, pair[1].order))
    return [u for score, u in full if score >= RELATIVE_TO_BEST * full[0][0]] if full else []


def _score(unit: Unit, idf: dict[str, float], avg_len: float) -> float:
    tf = Counter(t for t in unit.terms if t in idf)
    if not tf:
        return 0.0
    norm = K1 * (1 - B + B * len(unit.terms) / avg_len)
    base = sum(idf[t] * f * (K1 + 1) / (f + norm) for t, f in tf.items())
    return base * (1 + PROXIMITY_WEIGHT * _proximity(unit.terms, set(tf)))


def _proximity(terms: tuple[str, ...], matched: set[str]) -> float:
    """1 when the matched terms stand side by side, falling as the shortest stretch holding them all grows."""
    k = len(matched)
    if k < 2:
        return 0.0
    counts: Counter[str] = Counter()
    have, left, shortest = 0, 0, len(terms)
    for right, term in enumerate(terms):
        if term not in matched:
            continue
        counts[term] += 1
        have += counts[term] == 1
        while have == k:
            shortest = min(shortest, right - left + 1)
            gone = terms[left]
            left += 1
            if gone in matched:
                counts[gone] -= 1
                have -= counts[gone] == 0
    return (k - 1) / max(shortest - 1, k - 1)


def _compose(chosen: list[Unit], max_chars: int) -> ExtractiveAnswer:
    """The best unit always (cut to `max_chars` when longer); the others while they fit; then in passage order."""
    kept: list[Unit] = []
    used = 0
    for unit in chosen:
        size = len(unit.text) + 6
        if kept and used + size > max_chars:
            continue
        kept.append(unit)
        used += size
    if not kept:
        return ExtractiveAnswer("", ())
    kept.sort(key=lambda u: (u.n, u.order))
    text, previous = "", ""
    for unit in kept:
        sentence = _cut(unit.text, max_chars)
        gap = "" if not text or _cjk_ended(previous) else " "  # Chinese runs on after its full stop
        text += gap + _cited(sentence, unit.n)
        previous = sentence
    return ExtractiveAnswer(text, tuple(dict.fromkeys(u.n for u in kept)))


def _cjk_ended(text: str) -> bool:
    return text[-1:] in _CJK_END


def _cited(text: str, n: int) -> str:
    """Chinese runs the mark on after its full stop; English puts a space before it."""
    return f"{text}[{n}]" if _cjk_ended(text) else f"{text} [{n}]"


def _cut(text: str, max_chars: int) -> str:
    if len(text) <= max_chars:
        return text
    head = text[:max_chars - 1]
    space = head.rfind(" ")
    return (head[:space] if space > max_chars // 2 else head).rstrip() + "…"


def _closest(terms: Terms, preferred: set[int], pool: list[Unit], looked_up: list[PassageTerms]) -> tuple[float, int]:
    """The passage sentence covering most of `terms` (the preferred passages' win near ties), and its score."""
    scores = [(c + PREFERRED_BONUS * (c > 0 and u.n in preferred), i)
              for i, (u, p) in enumerate(zip(pool, looked_up)) for c in (p.covered(terms),)]
    return max(scores, key=lambda pair: (pair[0], -pair[1]), default=(0.0, -1))


def _best(scores: dict[int, float], pool: list[Unit], most: int) -> list[Unit]:
    return [pool[i] for i in sorted(scores, key=lambda i: -scores[i])[:most]]


def supporting_quotes(grounding: Grounding, passages: Sequence[str], max_sentences: int = 3,
                      question: str = "") -> str:
    """The passages' sentences closest to what the answer said, one a line, quoted and cited: what the "quote"
    policy shows instead of an unsupported answer. When no passage sentence holds QUOTE_AT of an answer sentence's
    terms: the sentences that best answer `question` if given, else those sharing most with the answer at all;
    "" when nothing shares a term."""
    pool = units(passages)
    looked_up = [passage_terms(u.text) for u in pool]
    close: dict[int, float] = {}
    loose: dict[int, float] = {}
    for sentence in grounding.sentences:
        terms = sentence_terms(sentence.text)
        preferred = set(sentence.passages)
        for _ in range(2):  # a sentence joining two passages' facts gets a quote from each
            score, i = _closest(terms, preferred, pool, looked_up)
            if score <= 0:
                break
            found = close if score >= QUOTE_AT else loose
            found[i] = max(found.get(i, 0.0), score)
            terms = Terms(terms.words - looked_up[i].words, terms.bigrams - looked_up[i].bigrams, terms.facts, "")
            if score < QUOTE_AT or terms.empty:
                break
    chosen = _best(close, pool, max_sentences)
    if not chosen:
        chosen = rank(question, pool)[:max_sentences] if question else _best(loose, pool, max_sentences)
    chosen.sort(key=lambda u: (u.n, u.order))
    return "\n".join(f'"{u.text}" [{u.n}]' for u in chosen)
