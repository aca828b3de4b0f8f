"""AFQMC's labelled pairs on their own: can a check built from what this box has tell a Chinese paraphrase from a
near-miss at all?

The cache protocol (store every text_a, look up every text_b) counts a hit on another pair's question as wrong even
when it is a paraphrase, so its wrong-hit share mixes two things. Here each pair is judged alone, on its own label:
would the check serve text_a's answer to text_b? Three checks, each chosen or trained on the even pairs and reported
on the odd ones: the cosine alone, the product's check (cosine + the rules of appliance.cache.verify), and the best
this box's material allows: a logistic regression over every signal the rules use and a few more (character and
word overlap, jieba words, the USE cosine). If even that is near chance, no threshold or rule on these vectors can
make a Chinese semantic cache right, and only a model trained for Chinese paraphrase could.
"""
from __future__ import annotations

import difflib
import logging

import numpy as np

FEATURES = ("cosine", "characters shared", "character pairs shared", "content characters on one side only",
            "numbers differ (rule)", "negation differs (rule)", "length gap", "jieba words shared", "sequence ratio")
PROBABILITIES = (0.5, 0.6, 0.7, 0.8)


def run(pairs, vectors, threshold: float, max_term_difference: float) -> dict:
    from appliance.cache.verify import near_miss

    dense = {t: vectors.dense[vectors.row[t]] for t in vectors.texts}
    x = np.array([features(p.a, p.b, dense) for p in pairs], np.float64)
    y = np.array([p.label for p in pairs], np.int8)
    served = np.array([near_miss(p.a, p.b, max_term_difference_zh=max_term_difference) is None for p in pairs])
    dev, held = slice(0, None, 2), slice(1, None, 2)
    model = fit_logistic(x[dev], y[dev])
    p_dev, p_held = predict(model, x[dev]), predict(model, x[held])
    cosine = x[:, 0]
    out = {"pairs": len(pairs), "held_out_pairs": int(len(y[held])), "features": list(FEATURES),
           "weights": [round(float(w), 3) for w in model[2]],
           "auc": {"cosine": auc(cosine[held], y[held]), "logistic": auc(p_held, y[held])},
           "accuracy": {"cosine at its best dev cut": _accuracy_at_best_cut(cosine[dev], y[dev], cosine[held],
                                                                            y[held]),
                        "logistic at 0.5": round(float(((p_held >= 0.5) == y[held]).mean()), 4),
                        "logistic at 0.5 on dev (trained on)": round(float(((p_dev >= 0.5) == y[dev]).mean()), 4)},
           "served": {}}
    product = (cosine >= threshold) & served
    out["served"][f"product check: cosine {threshold} + rules"] = _counts(product[held], y[held])
    out["served"][f"cosine {threshold} alone"] = _counts(cosine[held] >= threshold, y[held])
    for cut in PROBABILITIES:
        out["served"][f"logistic p >= {cut}"] = _counts(p_held >= cut, y[held])
    return out


def features(a: str, b: str, dense: dict) -> list[float]:
    import jieba

    from appliance.cache.verify import near_miss
    from appliance.text import content_chars

    jieba.setLogLevel(logging.WARNING)
    words_a = {w for w in jieba.lcut(a) if w.strip()}
    words_b = {w for w in jieba.lcut(b) if w.strip()}
    chars_a, chars_b = set(content_chars(a)), set(content_chars(b))
    rule = near_miss(a, b)  # numbers first, then negation (names are Latin); the term check off
    return [float(dense[a] @ dense[b]), _jaccard(chars_a, chars_b), _jaccard(_char_pairs(a), _char_pairs(b)),
            len(chars_a ^ chars_b) / max(len(chars_a) + len(chars_b), 1), float(rule == "different numbers"),
            float(rule == "negation differs"), abs(len(a) - len(b)) / max(len(a), len(b), 1),
            _jaccard(words_a, words_b), difflib.SequenceMatcher(None, a, b).ratio()]


def fit_logistic(x: np.ndarray, y: np.ndarray, l2: float = 1.0, steps: int = 4000, rate: float = 0.1):
    """Standardised features, L2-regularised logistic regression by gradient descent (a convex fit: no seed)."""
    mean, scale = x.mean(0), x.std(0) + 1e-9
    z = (x - mean) / scale
    w, bias = np.zeros(z.shape[1]), 0.0
    for _ in range(steps):
        p = 1 / (1 + np.exp(-(z @ w + bias)))
        w -= rate * (z.T @ (p - y) + l2 * w) / len(y)
        bias -= rate * float((p - y).mean())
    return mean, scale, w, bias


def predict(model, x: np.ndarray) -> np.ndarray:
    mean, scale, w, bias = model
    return 1 / (1 + np.exp(-(((x - mean) / scale) @ w + bias)))


def auc(scores: np.ndarray, labels: np.ndarray) -> float:
    """The chance that a random duplicate scores above a random non-duplicate (ties count half)."""
    pos, neg = scores[labels == 1], scores[labels == 0]
    above = (pos[:, None] > neg[None, :]).sum() + 0.5 * (pos[:, None] == neg[None, :]).sum()
    return round(float(above / (len(pos) * len(neg))), 4)


def _accuracy_at_best_cut(dev_scores, dev_labels, scores, labels) -> float:
    cuts = np.unique(dev_scores)
    best = max(cuts, key=lambda c: ((dev_scores >= c) == dev_labels).mean())
    return round(float(((scores >= best) == labels).mean()), 4)


def _counts(served: np.ndarray, labels: np.ndarray) -> dict:
    right, wrong = int((served & (labels == 1)).sum()), int((served & (labels == 0)).sum())
    return {"served": right + wrong, "right": right, "wrong": wrong,
            "wrong_share": round(wrong / (right + wrong), 4) if right + wrong else None,
            "duplicates_served": round(right / max(int((labels == 1).sum()), 1), 4)}


def _jaccard(a, b) -> float:
    a, b = set(a), set(b)
    return len(a & b) / len(a | b) if a | b else 1.0


def _char_pairs(text: str) -> list[str]:
    return [text[i:i + 2] for i in range(len(text) - 1)]
