"""Does an answer decline because the documents do not hold the answer? A refusal is not a claim: there is nothing
in it to check against the passages, and a question the documents do not cover is a fine outcome.

Phrasings are kept as a list of short patterns, each with bounded gaps only (an answer is untrusted text).
"""
from __future__ import annotations

import re

from .sentences import split_sentences
from .terms import sentence_terms

_SOURCES = r"(?:documents?|passages?|context|sources?|excerpts?|texts?|materials?|information provided|records?)"
_SOURCE = rf"(?:the|these|those|provided|given|available|retrieved|supplied|your)\s+(?:\w+\s+)?{_SOURCES}"
_VERBS = (r"(?:cover|contain|mention|provide|include|say|state|specify|address|discuss|answer|describe|explain|give"
          r"|offer|indicate|list|tell)")
_NEGATION = r"(?:do(?:es)?\s+not|do(?:es)?n['’]t|never|fail\s+to)"

ENGLISH = [
    rf"\b{_SOURCE}\b[^.!?\n]{{0,80}}?\b{_NEGATION}\s+(?:\w+\s+){{0,2}}?{_VERBS}",
    rf"\bnot\s+(?:\w+\s+){{0,2}}?(?:mentioned|covered|found|provided|specified|stated|addressed|included|given|"
    rf"described|discussed|available)\s+(?:anywhere\s+)?in\s+{_SOURCE}",
    r"\bno\s+(?:\w+\s+)?(?:information|mention|details?|data|answer|reference)\s+(?:about|on|regarding|of|"
    r"concerning|as to|in)\b",
    r"\b(?:i|we)\s+(?:cannot|can['’]t|can\s+not|could\s+not|couldn['’]t|am\s+unable\s+to|was\s+unable\s+to|"
    r"are\s+unable\s+to|do\s+not|don['’]t)\s+(?:\w+\s+)?(?:find|locate|determine|answer|identify|know|see)\b",
    r"\b(?:unable|not\s+possible|impossible)\s+to\s+(?:answer|determine|find|tell)\b",
    r"\b(?:insufficient|not\s+enough)\s+(?:information|context|detail)",
    r"\b(?:does|do)\s+not\s+appear\s+(?:\w+\s+)?in\s+" + _SOURCE,
]
CHINESE = [
    r"(?:文档|文件|资料|材料|段落|上下文|文中|文本|原文)[^。！？\n]{0,12}?(?:没有|未|并未|不)(?:提到|提及|包含|涉及|说明|"
    r"给出|记载|介绍|出现|覆盖|回答)",
    r"没有(?:提到|提及|涉及|相关(?:的)?(?:信息|内容|说明|资料)|找到|给出|说明)",
    r"未(?:提及|提到|涉及|说明|给出|包含|找到)",
    r"(?:无法|不能|难以)(?:回答|确定|找到|得知|判断|从)",
    r"找不到|不知道|没有足够的?信息|信息不足",
]
_PATTERNS = re.compile("|".join(f"(?:{p})" for p in ENGLISH + CHINESE), re.IGNORECASE)
MAX_SENTENCE_CHARS = 600  # a refusal is short; a longer sentence is looked at only this far


def is_refusal(sentence: str) -> bool:
    """One sentence that says the documents do not cover the question."""
    return _PATTERNS.search(sentence[:MAX_SENTENCE_CHARS]) is not None


def says_not_covered(answer: str) -> bool:
    """Whether the answer declines for want of support in the documents: its first sentence with any content
    says so. An answer that opens with a claim and mentions later that something is not covered still claims."""
    for piece in split_sentences(answer):
        if not sentence_terms(piece.text).empty:
            return is_refusal(piece.text)
    return False
