"""Model router: send a question to the small or the large LLM.

A decision costs microseconds once the query embedding exists: code and maths rules, length and context rules,
then an L2-regularised logistic regression over [query embedding, four hand features], trained at model-build
time on labelled questions (`build_router`). The text is normalised before anything is computed from it, because
the training data has artifacts (NQ factoids are lower-case without '?') that must not become the decision rule.
"""
from __future__ import annotations

import json
import math
import os
import re
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from ..text.normalise import fold as _fold
from ..text.normalise import strip_punctuation as _strip

FORMAT = 1
# L2 penalties, chosen by 5-fold CV on the 682 labelled questions: strong on the embedding block (384+ weights for
# 682 examples; l2 3 lost 4 points of simple_to_small), light on the four standardised hand features.
DEFAULT_L2 = 100.0
DEFAULT_L2_FEATURES = 0.3
MAX_CONTEXT_SMALL = 6000  # tokens of retrieved context above which the small model is not trusted (not learned)
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
# Hard rules on NFKC + case-folded text, before punctuation is stripped: code by its syntax or a request for it,
# maths by an expression. The training data cannot teach these (its code is HumanEval prompts, its maths long
# GSM8K stories, so a short "Solve 3x + 5 = 20" looks simple to the classifier); none fires on its 200 factoids.
_CODE = re.compile(r"```|>>>|^\s*(?:def|class)\s+\w+\s*[(:]|^\s*(?:from\s+[\w.]+\s+)?import\s+\w+"
                   r"|\w\([^()\n]*\)\s*(?:->|\{)|;\s*$"
                   r"|\b(?:write|implement|debug|refactor|fix|optimi[sz]e)\b.*(?:\b(?:function|code|script|program"
                   r"|class|method|query|regex|algorithm|python|javascript|typescript|java|rust|sql|bash)\b|c\+\+)",
                   re.M)
_MATHS_EXPR = re.compile(r"\d\s*[+*×÷^=]\s*[\d(a-z]|[a-z)]\s*[+*^=]\s*\d|\d\s*%\s*of\s*\d"
                         r"|\b(?:solve|calculate|compute)\b.*\d")


def normalise_question(text: str) -> str:
    """NFKC, case-fold, punctuation out (kept inside numbers), whitespace collapsed: the text to embed and to
    compute features from, so that "What is X?" and "what is x" are one question."""
    return _strip(_fold(text))


def _features(folded: str) -> tuple[int, np.ndarray]:
    """(word count, [log words, comparison cue, log multi-step cues, log maths cues]) of an NFKC + case-folded
    text. Words come from the normalised text; maths symbols from the folded one ('%', '/' are punctuation)."""
    norm = _strip(folded)
    tokens = norm.split()
    ors = [i for i, t in enumerate(tokens) if t == "or"]
    comparison = (not _COMPARE_WORDS.isdisjoint(tokens) or "in common" in norm or "difference between" in norm
                  or bool(ors) and any(t in _COMPARATIVES for t in tokens[:ors[-1]]))  # "which is older, a or b"
    steps = sum(t in _STEP_WORDS for t in tokens[1:])  # relative clauses, sequencing; not the leading wh-word
    maths = (sum(t in _MATHS_WORDS or _NUMBER.match(t) is not None for t in tokens)
             + sum(folded.count(c) for c in _MATHS_SYMBOLS))
    return len(tokens), np.array([math.log1p(len(tokens)), float(comparison), math.log1p(steps), math.log1p(maths)])


@dataclass(slots=True, frozen=True)
class RouteDecision:
    engine: str  # "small" | "large"
    reason: str
    p_large: float  # after `bias`: > 0.5 means the classifier alone would pick "large"
    decision_ms: float


class Router:
    def __init__(self, embedder: str, w_emb: np.ndarray, w_feat: np.ndarray, intercept: float,
                 feat_mean: np.ndarray, feat_std: np.ndarray, meta: dict | None = None):
        self.embedder = embedder
        self.dim = int(w_emb.shape[0])
        self.w_emb = np.ascontiguousarray(w_emb, dtype=np.float32)
        # Standardisation folded into the weights: one dot product per decision.
        self._w_feat = (w_feat / feat_std).astype(np.float64)
        self._b = float(intercept - (w_feat / feat_std) @ feat_mean)
        self.w_feat, self.intercept, self.feat_mean, self.feat_std = w_feat, float(intercept), feat_mean, feat_std
        self.meta = meta or {}

    def decide(self, text: str, embedding: np.ndarray, bias: float = 0.0, max_words_small: int = 60,
               context_tokens: int = 0, max_context_small: int = MAX_CONTEXT_SMALL) -> RouteDecision:
        """`embedding`: the encoder's dense vector for normalise_question(text). `bias` is added to the log-odds of
        "large" (negative sends more to small)."""
        start = time.perf_counter()
        emb = np.asarray(embedding).reshape(-1)
        if emb.shape[0] != self.dim:
            raise ValueError(f"router trained on {self.embedder} ({self.dim}-d) got a {emb.shape[0]}-d embedding: "
                             "rebuild it for this embedder (`build_router`)")
        folded = _fold(text)
        words, feats = _features(folded)
        z = float(emb @ self.w_emb) + float(feats @ self._w_feat) + self._b + bias
        p = 1.0 / (1.0 + math.exp(-z)) if z > -700 else 0.0
        if _CODE.search(folded):
            engine, reason = "large", "code cue"
        elif _MATHS_EXPR.search(folded):
            engine, reason = "large", "maths cue"
        elif words > max_words_small:
            engine, reason = "large", f"longer than {max_words_small} words"
        elif context_tokens > max_context_small:
            engine, reason = "large", f"context {context_tokens} tokens > {max_context_small}"
        else:
            engine = "large" if z > 0 else "small"
            reason = f"classifier p_large={p:.2f}" + (f" (bias {bias:+g})" if bias else "")
        return RouteDecision(engine, reason, p, (time.perf_counter() - start) * 1e3)

    def save(self, path: Path) -> None:
        """Atomic: a reader sees the old file or the new one, never half of one."""
        path = Path(path)
        tmp = path.with_name(path.name + ".tmp")
        with open(tmp, "wb") as f:
            np.savez(f, format=FORMAT, embedder=np.array(self.embedder), dim=self.dim, w_emb=self.w_emb,
                     w_feat=self.w_feat, intercept=self.intercept, feat_mean=self.feat_mean,
                     feat_std=self.feat_std, features=np.array(FEATURES), meta=np.array(json.dumps(self.meta)))
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)

    @classmethod
    def load(cls, path: Path, embedder: str | None = None) -> "Router":
        """With `embedder`, refuse a router trained for another one."""
        with np.load(Path(path), allow_pickle=False) as z:
            if int(z["format"]) != FORMAT or tuple(z["features"].tolist()) != FEATURES:
                raise ValueError(f"{path}: router file from another version: rebuild it (`build_router`)")
            if z["w_emb"].shape != (int(z["dim"]),) or z["w_feat"].shape != (len(FEATURES),):
                raise ValueError(f"{path}: corrupt router file")
            router = cls(str(z["embedder"]), z["w_emb"], z["w_feat"], float(z["intercept"]), z["feat_mean"],
                         z["feat_std"], json.loads(str(z["meta"])))
        if embedder is not None and embedder != router.embedder:
            raise ValueError(f"{path}: router trained for embedder {router.embedder!r} ({router.dim}-d), "
                             f"not {embedder!r}: rebuild it for this embedder")
        return router


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
                 l2: float = DEFAULT_L2, l2_features: float = DEFAULT_L2_FEATURES) -> Router:
    """Label 1 = complex (route large). `embeddings`: the encoder's vectors of normalise_question(text)."""
    y = np.asarray(labels, dtype=np.int64)
    emb = np.asarray(embeddings, dtype=np.float64)
    if emb.ndim != 2 or len(emb) != len(texts) or len(y) != len(texts) or set(y.tolist()) != {0, 1}:
        raise ValueError("need one embedding and one 0/1 label per text, both classes present")
    feats = np.stack([_features(_fold(t))[1] for t in texts])
    mean, std = feats.mean(axis=0), np.maximum(feats.std(axis=0), 1e-6)
    # Unit-norm embeddings have coordinates ~ 1/sqrt(dim): scaled to ~1 like the standardised features, so that
    # the penalties mean the same for any embedder.
    scale = math.sqrt(emb.shape[1])
    x = np.hstack([emb * scale, (feats - mean) / std, np.ones((len(y), 1))])
    dim = emb.shape[1]
    penalty = np.concatenate([np.full(dim, l2), np.full(len(FEATURES), l2_features), [0.0]])
    w = _fit_logistic(x, y, penalty)
    meta = {"l2": l2, "l2_features": l2_features, "n_train": len(y), "n_complex": int(y.sum())}
    return Router(embedder, w[:dim] * scale, w[dim:-1], float(w[-1]), mean, std, meta)


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
    router = train_router(texts, labels, encode_questions(encoder, texts), encoder.name)
    out = Path(out_dir) / "router.npz"
    out.parent.mkdir(parents=True, exist_ok=True)
    router.save(out)
    return out


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
    routers = [train_router([texts[i] for i in np.flatnonzero(fold_of != k)], y[fold_of != k].tolist(),
                            emb[fold_of != k], embedder, l2, l2_features) for k in range(folds)]
    # Decided after all the training, so that the timings do not include BLAS threads still busy from a fit.
    decisions = [routers[fold_of[i]].decide(texts[i], emb[i], bias=bias, max_words_small=max_words_small)
                 for i in range(len(y))]
    return _summary(decisions, labels, categories) | {"folds": folds, "l2": l2, "l2_features": l2_features}
