"""Router training at model-build time: labelled questions -> `RouterWeights` (router.npz).

The runtime router (`decision.py`) reads what this writes; both compute features with `features.py`.
"""
from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np

from ..text import normalise_question
from .features import FEATURES, question_features
from .weights import RouterWeights

# L2 penalties, chosen by 5-fold CV on the 682 labelled questions: strong on the embedding block (384+ weights for
# 682 examples; l2 3 lost 4 points of simple_to_small), light on the four standardised hand features.
DEFAULT_L2 = 100.0
DEFAULT_L2_FEATURES = 0.3


def _fit_logistic(x: np.ndarray, y: np.ndarray, penalty: np.ndarray, iters: int = 50) -> np.ndarray:
    """Newton's method on class-balanced, L2-penalised log-loss (the last column is the unpenalised intercept).
    Class balance makes log-odds 0 sit between the classes, so bias 0 aims at equal recall on both."""
    counts = np.bincount(y, minlength=2).astype(np.float64)
    sample_w = (len(y) / (2.0 * counts))[y]
    w = np.zeros(x.shape[1])
    for _ in range(iters):
        p = 1.0 / (1.0 + np.exp(-np.clip(x @ w, -50, 50)))
        grad = x.T @ (sample_w * (p - y)) + penalty * w
        hess = (x * (sample_w * p * (1 - p))[:, None]).T @ x + np.diag(penalty)
        step = np.linalg.solve(hess, grad)
        w -= step
        if np.abs(step).max() < 1e-9:
            break
    return w


def train_router(texts: list[str], labels: list[int], embeddings: np.ndarray, embedder: str,
                 l2: float = DEFAULT_L2, l2_features: float = DEFAULT_L2_FEATURES) -> RouterWeights:
    """Label 1 = complex (route large). `embeddings`: the encoder's vectors of normalise_question(text)."""
    y = np.asarray(labels, dtype=np.int64)
    emb = np.asarray(embeddings, dtype=np.float64)
    if emb.ndim != 2 or len(emb) != len(texts) or len(y) != len(texts) or set(y.tolist()) != {0, 1}:
        raise ValueError("need one embedding and one 0/1 label per text, both classes present")
    feats = np.stack([question_features(t).vector for t in texts])
    mean, std = feats.mean(axis=0), np.maximum(feats.std(axis=0), 1e-6)
    # Unit-norm embeddings have coordinates ~ 1/sqrt(dim): scaled to ~1 like the standardised features, so that
    # the penalties mean the same for any embedder.
    scale = math.sqrt(emb.shape[1])
    x = np.hstack([emb * scale, (feats - mean) / std, np.ones((len(y), 1))])
    dim = emb.shape[1]
    penalty = np.concatenate([np.full(dim, l2), np.full(len(FEATURES), l2_features), [0.0]])
    w = _fit_logistic(x, y, penalty)
    meta = {"l2": l2, "l2_features": l2_features, "n_train": len(y), "n_complex": int(y.sum())}
    return RouterWeights(embedder, w[:dim] * scale, w[dim:-1], float(w[-1]), mean, std, meta)


def load_questions(path: Path) -> tuple[list[str], list[int], list[str]]:
    """texts, labels (1 = complex), categories from a questions.jsonl."""
    texts, labels, categories = [], [], []
    with open(path, encoding="utf-8") as f:
        for line in f:
            if line.strip():
                row = json.loads(line)
                texts.append(row["text"])
                labels.append(1 if row["difficulty"] == "complex" else 0)
                categories.append(row.get("category", row["difficulty"]))
    return texts, labels, categories


def encode_questions(encoder, texts: list[str], batch: int = 128) -> np.ndarray:
    normalised = [normalise_question(t) for t in texts]
    return np.vstack([encoder.encode(normalised[i:i + batch]).dense for i in range(0, len(normalised), batch)])


def build_router(out_dir: Path, questions: Path, encoder) -> Path:
    """Encode the labelled questions with `encoder`, train, save out_dir/router.npz (atomically); returns it."""
    texts, labels, _ = load_questions(questions)
    weights = train_router(texts, labels, encode_questions(encoder, texts), encoder.name)
    out = Path(out_dir) / "router.npz"
    out.parent.mkdir(parents=True, exist_ok=True)
    weights.save(out)
    return out
