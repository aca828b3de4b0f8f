"""Model router: send a question to the small or the large LLM.

A decision costs microseconds once the query embedding exists: code and maths rules, length and context rules,
then an L2-regularised logistic regression over [query embedding, four hand features] (`features.py`), whose
weights (`weights.py`) are trained at model-build time (`training.py`). This module only decides.
"""
from __future__ import annotations

import math
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from .features import question_features
from .weights import RouterWeights

MAX_CONTEXT_SMALL = 6000  # tokens of retrieved context above which the small model is not trusted (not learned)


@dataclass(slots=True, frozen=True)
class RouteDecision:
    engine: str  # "small" | "large"
    reason: str
    p_large: float  # after `bias`: > 0.5 means the classifier alone would pick "large"
    decision_ms: float


class Router:
    def __init__(self, weights: RouterWeights):
        self.weights = weights
        self.embedder, self.dim = weights.embedder, weights.dim
        self._w_emb = np.ascontiguousarray(weights.w_emb, dtype=np.float32)
        # Standardisation folded into the weights: one dot product per decision.
        self._w_feat = (weights.w_feat / weights.feat_std).astype(np.float64)
        self._b = float(weights.intercept - self._w_feat @ weights.feat_mean)

    @classmethod
    def load(cls, path: Path, embedder: str | None = None) -> Router:
        """With `embedder`, refuse a router trained for another one."""
        return cls(RouterWeights.load(path, embedder))

    def decide(self, text: str, embedding: np.ndarray, bias: float = 0.0, max_words_small: int = 60,
               context_tokens: int = 0, max_context_small: int = MAX_CONTEXT_SMALL) -> RouteDecision:
        """`embedding`: the encoder's dense vector for normalise_question(text). `bias` is added to the log-odds of
        "large" (negative sends more to small)."""
        start = time.perf_counter()
        emb = np.asarray(embedding).reshape(-1)
        if emb.shape[0] != self.dim:
            raise ValueError(f"router trained on {self.embedder} ({self.dim}-d) got a {emb.shape[0]}-d embedding: "
                             "rebuild it for this embedder (`appliance models build`)")
        features = question_features(text)
        z = float(emb @ self._w_emb) + float(features.vector @ self._w_feat) + self._b + bias
        p = 1.0 / (1.0 + math.exp(-z)) if z > -700 else 0.0
        if features.code_cue:
            engine, reason = "large", "code cue"
        elif features.maths_cue:
            engine, reason = "large", "maths cue"
        elif features.words > max_words_small:
            engine, reason = "large", f"longer than {max_words_small} words"
        elif context_tokens > max_context_small:
            engine, reason = "large", f"context {context_tokens} tokens > {max_context_small}"
        else:
            engine = "large" if z > 0 else "small"
            reason = f"classifier p_large={p:.2f}" + (f" (bias {bias:+g})" if bias else "")
        return RouteDecision(engine, reason, p, (time.perf_counter() - start) * 1e3)
