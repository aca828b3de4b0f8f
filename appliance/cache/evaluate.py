"""`appliance eval cache`: right and wrong hits of the semantic cache on labelled question pairs.

Every text_a is stored (once) in a fresh cache with its own answer; then each text_b is looked up. A hit is
right only when the pair is labelled a duplicate and the entry found is that pair's own text_a; any other hit
(a non-duplicate, or some other stored question) counts as wrong: it would have served another question's answer.
"""
from __future__ import annotations

import csv
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from ..text import question_key
from .semantic import SemanticCache, SemanticParams

SCOPE = "eval"


@dataclass(slots=True)
class Pair:
    a: str
    b: str
    label: int


def load_pairs(path: Path) -> list[Pair]:
    """text_a, text_b, label; tab-separated, a header line, no quoting."""
    pairs = []
    with open(path, encoding="utf-8", newline="") as f:
        reader = csv.reader(f, delimiter="\t", quoting=csv.QUOTE_NONE)
        header = next(reader, None)
        if header is None or [h.strip() for h in header[:3]] != ["text_a", "text_b", "label"]:
            raise ValueError(f"{path}: the first line must be the header text_a<TAB>text_b<TAB>label")
        for n, row in enumerate(reader, 2):
            if len(row) != 3 or row[2].strip() not in {"0", "1"}:
                raise ValueError(f"{path}:{n}: expected text_a<TAB>text_b<TAB>0|1")
            pairs.append(Pair(row[0], row[1], int(row[2])))
    return pairs


def evaluate_pairs(pairs: list[Pair], encode, params: SemanticParams, folder: Path | None = None) -> dict:
    """`encode(texts) -> (dense (n, dim), tokens list or None[, unknown word-piece shares (n,)])`. Returns the
    counts and lookup latency; questions the encoder cannot represent are neither stored nor answered."""
    texts_a = list(dict.fromkeys(p.a for p in pairs))
    dense_a, tokens_a, unknown_a = _unpack(encode(texts_a))
    dense_b, tokens_b, unknown_b = _unpack(encode([p.b for p in pairs]))
    with tempfile.TemporaryDirectory() as tmp:
        cache = SemanticCache(Path(folder or tmp) / "semantic", dense_a.shape[1], params, 1 << 34)
        try:
            for i, text in enumerate(texts_a):
                cache.store("eval", SCOPE, text, dense_a[i], {}, {"answer": text},
                            None if tokens_a is None else tokens_a[i], float(unknown_a[i]))
            stored, refused = len(cache), int((unknown_b > params.max_unknown).sum())
            right = wrong = 0
            latencies = []
            for i, pair in enumerate(pairs):
                started = time.perf_counter()
                found = cache.lookup("eval", SCOPE, pair.b, dense_b[i], {},
                                     None if tokens_b is None else tokens_b[i], float(unknown_b[i]))
                latencies.append((time.perf_counter() - started) * 1000)
                if found.hit is None:
                    continue
                if pair.label == 1 and question_key(found.hit.question) == question_key(pair.a):
                    right += 1
                else:
                    wrong += 1
        finally:
            cache.close()
    hits = right + wrong
    return {
        "pairs": len(pairs), "duplicates": sum(p.label for p in pairs), "stored": stored, "refused": refused,
        "right_hits": right, "wrong_hits": wrong, "hit_rate": round(hits / len(pairs), 4) if pairs else 0.0,
        "wrong_hit_share": round(wrong / hits, 4) if hits else 0.0,
        "p50_lookup_ms": round(float(np.percentile(latencies, 50)), 3) if latencies else None,
        "p99_lookup_ms": round(float(np.percentile(latencies, 99)), 3) if latencies else None,
        "threshold": params.threshold, "late_threshold": params.late_threshold, "max_unknown": params.max_unknown,
        "threshold_zh": params.threshold_zh, "max_term_difference_zh": params.max_term_difference_zh,
    }


def _unpack(encoded: tuple) -> tuple[np.ndarray, list | None, np.ndarray]:
    """(dense, tokens, unknown shares), with full coverage where the encoder reports none."""
    dense, tokens = encoded[0], encoded[1]
    unknown = encoded[2] if len(encoded) > 2 and encoded[2] is not None else np.zeros(len(dense), np.float32)
    return dense, tokens, np.asarray(unknown, np.float32)
