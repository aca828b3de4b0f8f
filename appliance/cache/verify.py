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

_NUMBER = re.compile(r"\d+(?:[.,]\d+)*")
_NEGATION_EN = re.compile(
    r"n['’]t\b|\b(?:not|no|never|none|nothing|nobody|neither|nor|cannot|without|dont|doesnt|didnt|cant|wont|"
    r"isnt|arent|wasnt|werent|shouldnt|couldnt|wouldnt|havent|hasnt)\b")
_NEGATION_ZH = re.compile(r"[不没無无非未别莫勿]")
_WORD = re.compile(r"[^\W_]+(?:['’][^\W_]+)?")
_SENTENCE_START = re.compile(r"(?:^|[.!?]\s+)([^\W_]+)")


def near_miss(a: str, b: str, a_tokens: np.ndarray | None = None, b_tokens: np.ndarray | None = None,
              late_threshold: float = 0.0) -> str | None:
    """Why `b` must not be answered with `a`'s answer, or None if no rule objects."""
    a_n, b_n = unicodedata.normalize("NFKC", a), unicodedata.normalize("NFKC", b)
    if sorted(_NUMBER.findall(a_n)) != sorted(_NUMBER.findall(b_n)):
        return "different numbers"
    if _negated(a_n) != _negated(b_n):
        return "negation differs"
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
    return bool(_NEGATION_EN.search(text) or _NEGATION_ZH.search(text))


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
