"""What the router computes from a question's text: four hand features and two rule cues.

Shared by the runtime router (`decision.py`) and its training at model-build time (`training.py`), so both see the
same numbers. The text is normalised before anything is computed from it (`text.normalise_question`, the text the
router's embedding is computed from too), because the training data has artifacts (NQ factoids are lower-case
without '?') that must not become the decision rule.

Every pattern here runs in linear time on any input: a question is user input, and a quadratic regex on a long
prompt is a denial of service. Rules of the form "a verb, later on the same line a noun" are therefore two simple
scans compared by position, not one `verb.*noun` regex (which rescans the rest of the line for every verb).
"""
from __future__ import annotations

import math
import re
from dataclasses import dataclass

import numpy as np

from ..text import fold, strip_punctuation

FEATURES = ("log_words", "comparison", "log_steps", "log_maths")

_NUMBER = re.compile(r"\d")
# Word lists over normalised tokens (sets, not regex alternations: 5x faster on a long prompt).
_COMPARE_WORDS = frozenset("both same compare compared comparison versus vs than".split())
_COMPARATIVES = frozenset("more less fewer older younger larger smaller bigger longer shorter earlier later first "
                          "higher lower taller greater most least".split())
_STEP_WORDS = frozenset("that which who whom whose where when then after before next finally".split())
_MATHS_WORDS = frozenset("total percent each per twice half times calculate average sum remaining left cost costs "
                         "much many".split())
_MATHS_SYMBOLS = "%$+=×÷*/"

# Rule cues on NFKC + case-folded text, before punctuation is stripped: code by its syntax or a request for it,
# maths by an expression. The training data cannot teach these (its code is HumanEval prompts, its maths long
# GSM8K stories, so a short "Solve 3x + 5 = 20" looks simple to the classifier); none fires on its 200 factoids.
# A line-start rule skips blanks within its line only (`[^\S\n]`): with `^\s*` every line start rescanned all the
# blank lines after it, and it found nothing more, since the last of those lines starts where the rule applies.
_CODE_SYNTAX = re.compile(r"```|>>>|^[^\S\n]*(?:def|class)\s+\w+\s*[(:]|^[^\S\n]*(?:from\s+[\w.]+\s+)?import\s+\w"
                          r"|\w\([^()\n]*\)\s*(?:->|\{)|;[^\S\n]*$", re.M)
_CODE_VERB = re.compile(r"\b(?:write|implement|debug|refactor|fix|optimi[sz]e)\b")
_CODE_NOUN = re.compile(r"\b(?:function|code|script|program|class|method|query|regex|algorithm|python|javascript"
                        r"|typescript|java|rust|sql|bash)\b|c\+\+")
_MATHS_SYNTAX = re.compile(r"\d\s*[+*×÷^=]\s*[\d(a-z]|[a-z)]\s*[+*^=]\s*\d|\d\s*%\s*of\s*\d")
_MATHS_VERB = re.compile(r"\b(?:solve|calculate|compute)\b")


@dataclass(slots=True, frozen=True)
class QuestionFeatures:
    words: int  # tokens of the normalised question
    vector: np.ndarray  # the hand features, in FEATURES order
    code_cue: bool  # code syntax, or a request to write/fix code
    maths_cue: bool  # an arithmetic expression, or "solve/calculate/compute" with a number after it


def question_features(text: str) -> QuestionFeatures:
    folded = fold(text)
    words, vector = _hand_features(folded)
    return QuestionFeatures(words, vector, code_cue(folded), maths_cue(folded))


def code_cue(folded: str) -> bool:
    """`folded`: NFKC + case-folded text (`text.fold`)."""
    return _CODE_SYNTAX.search(folded) is not None or _later_on_a_line(folded, _CODE_VERB, _CODE_NOUN)


def maths_cue(folded: str) -> bool:
    """`folded`: NFKC + case-folded text (`text.fold`)."""
    return _MATHS_SYNTAX.search(folded) is not None or _later_on_a_line(folded, _MATHS_VERB, _NUMBER)


def _later_on_a_line(text: str, first: re.Pattern, then: re.Pattern) -> bool:
    """Whether some line has a match of `first` followed, at or after its end, by a match of `then`: what
    `first.*then` finds, in one pass. The earliest `first` on a line ends first, so it is the only one to try."""
    for line in text.split("\n"):
        found = first.search(line)
        if found is not None and then.search(line, found.end()) is not None:
            return True
    return False


def _hand_features(folded: str) -> tuple[int, np.ndarray]:
    """(word count, [log words, comparison cue, log multi-step cues, log maths cues]) of an NFKC + case-folded
    text. Words come from the normalised text; maths symbols from the folded one ('%', '/' are punctuation)."""
    norm = strip_punctuation(folded)
    tokens = norm.split()
    ors = [i for i, t in enumerate(tokens) if t == "or"]
    comparison = (not _COMPARE_WORDS.isdisjoint(tokens) or "in common" in norm or "difference between" in norm
                  or bool(ors) and any(t in _COMPARATIVES for t in tokens[:ors[-1]]))  # "which is older, a or b"
    steps = sum(t in _STEP_WORDS for t in tokens[1:])  # relative clauses, sequencing; not the leading wh-word
    maths = (sum(t in _MATHS_WORDS or _NUMBER.match(t) is not None for t in tokens)
             + sum(folded.count(c) for c in _MATHS_SYMBOLS))
    return len(tokens), np.array([math.log1p(len(tokens)), float(comparison), math.log1p(steps), math.log1p(maths)])
