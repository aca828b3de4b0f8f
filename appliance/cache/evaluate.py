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

from .keys import normalise
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
    """`encode(texts) -> (dense (n, dim), tokens list or None)`. Returns the counts and lookup latency."""
    texts_a = list(dict.fromkeys(p.a for p in pairs))
    dense_a, tokens_a = encode(texts_a)
    dense_b, tokens_b = encode([p.b for p in pairs])
    with tempfile.TemporaryDirectory() as tmp:
        cache = SemanticCache(Path(folder or tmp) / "semantic", dense_a.shape[1], params, 1 << 34)
        try:
            for i, text in enumerate(texts_a):
                cache.store("eval", SCOPE, text, dense_a[i], {}, {"answer": text},
                            None if tokens_a is None else tokens_a[i])
            right = wrong = 0
            latencies = []
            for i, pair in enumerate(pairs):
                started = time.perf_counter()
                found = cache.lookup("eval", SCOPE, pair.b, dense_b[i], {},
                                     None if tokens_b is None else tokens_b[i])
                latencies.append((time.perf_counter() - started) * 1000)
                if found.hit is None:
                    continue
                if pair.label == 1 and normalise(found.hit.question) == normalise(pair.a):
                    right += 1
                else:
                    wrong += 1
        finally:
            cache.close()
    hits = right + wrong
    return {
        "pairs": len(pairs), "duplicates": sum(p.label for p in pairs), "stored": len(texts_a),
        "right_hits": right, "wrong_hits": wrong, "hit_rate": round(hits / len(pairs), 4) if pairs else 0.0,
        "wrong_hit_share": round(wrong / hits, 4) if hits else 0.0,
        "p50_lookup_ms": round(float(np.percentile(latencies, 50)), 3) if latencies else None,
        "p99_lookup_ms": round(float(np.percentile(latencies, 99)), 3) if latencies else None,
        "threshold": params.threshold, "late_threshold": params.late_threshold,
    }
