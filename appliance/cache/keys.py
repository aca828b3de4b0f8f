"""Cache keys: one normal form per question, so trivial variants of a question share an entry.

"RAG系统", "rag 系统" and "ＲＡＧ系统？" all become "rag系统": NFKC folds full-width forms, case is folded,
punctuation and runs of white space collapse, and spaces next to CJK characters (which has none) are dropped.
Punctuation inside numbers is kept: "3.5" and "35" must stay different questions.
"""
from __future__ import annotations

import hashlib
import json
import re

from ..text.normalise import fold, strip_punctuation

_CJK = "\u3040-\u30ff\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff\uac00-\ud7af"
_SPACE_NEAR_CJK = re.compile(rf"(?<=[{_CJK}]) | (?=[{_CJK}])")


def normalise(text: str) -> str:
    """The router's normal form of a question, without the spaces next to CJK characters."""
    return _SPACE_NEAR_CJK.sub("", strip_punctuation(fold(text)))


def answer_key(question: str, tenant: str, versions: dict[str, int], scope: str) -> str:
    """Exact-cache key: the normalised question plus everything else that changes the answer: the tenant, the
    partitions searched and their index versions, and `scope` (prompt version, requested model, task, length)."""
    material = json.dumps([normalise(question), tenant, sorted(versions.items()), scope], ensure_ascii=False)
    return hashlib.sha256(material.encode("utf-8")).hexdigest()
