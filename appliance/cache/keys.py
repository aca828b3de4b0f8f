"""Cache keys: one normal form per question (`text.question_key`), so trivial variants share an entry."""
from __future__ import annotations

import hashlib
import json

from ..text import question_key


def answer_key(question: str, tenant: str, versions: dict[str, int], scope: str) -> str:
    """Exact-cache key: the normalised question plus everything else that changes the answer: the tenant, the
    partitions searched and their index versions, and `scope` (prompt version, requested model, task, length)."""
    material = json.dumps([question_key(question), tenant, sorted(versions.items()), scope], ensure_ascii=False)
    return hashlib.sha256(material.encode("utf-8")).hexdigest()
