"""Router evaluation on labelled questions: the runtime decisions (`router.Router`) of routers trained by
`router.train_router`, in-sample or cross-validated. Used by `appliance eval router`, the tests and the
generation benchmark."""
from __future__ import annotations

import numpy as np

from ..router import DEFAULT_L2, DEFAULT_L2_FEATURES, RouteDecision, Router, train_router


def evaluate_router(router: Router, texts, labels, embeddings, bias: float = 0.0, max_words_small: int = 60,
                    categories=None) -> dict:
    """Routing figures on labelled questions; `per_category` (share routed correctly) when categories are given."""
    decisions = [router.decide(t, e, bias=bias, max_words_small=max_words_small) for t, e in zip(texts, embeddings)]
    return _summary(decisions, labels, categories)


def cross_validate(texts, labels, embeddings, embedder: str, folds: int = 5, categories=None,
                   l2: float = DEFAULT_L2, l2_features: float = DEFAULT_L2_FEATURES, bias: float = 0.0,
                   max_words_small: int = 60) -> dict:
    """Stratified k-fold (fixed seed): every question is decided by a router that never saw it; pooled figures."""
    y = np.asarray(labels)
    fold_of = np.empty(len(y), dtype=np.int64)
    rng = np.random.default_rng(0)
    for cls in (0, 1):
        idx = rng.permutation(np.flatnonzero(y == cls))
        fold_of[idx] = np.arange(len(idx)) % folds
    emb = np.asarray(embeddings)
    routers = [Router(train_router([texts[i] for i in np.flatnonzero(fold_of != k)], y[fold_of != k].tolist(),
                                   emb[fold_of != k], embedder, l2, l2_features)) for k in range(folds)]
    # Decided after all the training, so that the timings do not include BLAS threads still busy from a fit.
    decisions = [routers[fold_of[i]].decide(texts[i], emb[i], bias=bias, max_words_small=max_words_small)
                 for i in range(len(y))]
    return _summary(decisions, labels, categories) | {"folds": folds, "l2": l2, "l2_features": l2_features}


def _summary(decisions: list[RouteDecision], labels, categories=None) -> dict:
    large = np.array([d.engine == "large" for d in decisions])
    y = np.asarray(labels, dtype=bool)
    n_simple, n_complex = int((~y).sum()), int(y.sum())
    simple_small = int((~large & ~y).sum())
    complex_large = int((large & y).sum())
    s2s = simple_small / max(n_simple, 1)
    c2l = complex_large / max(n_complex, 1)
    out = {"simple_to_small": s2s, "complex_to_large": c2l, "small_share_80_20": 0.8 * s2s + 0.2 * (1 - c2l),
           "p99_decision_ms": float(np.percentile([d.decision_ms for d in decisions], 99)),
           "n_simple": n_simple, "n_complex": n_complex, "simple_small": simple_small,
           "complex_large": complex_large}
    if categories is not None:
        cats = np.asarray(categories)
        out["per_category"] = {c: float((large[cats == c] == y[cats == c]).mean()) for c in sorted(set(categories))}
    return out
