"""Section 5: the small/large router on the labelled questions.

The router is trained with the product's own `build_router` (appliance.router.training: MiniLM embeddings
of the normalised questions), read back with `Router.load` (appliance.router.decision), and scored with
`evaluate_router` on the same questions (in-sample) and with `cross_validate` (appliance.evaluate.router: every
question decided by a router that never saw it: the honest figure).
"""
from __future__ import annotations

import importlib.util
import time

from .data import CACHE, QUESTIONS, REPO

MODULES = ("appliance.router.decision", "appliance.router.training", "appliance.evaluate.router")


def available() -> str | None:
    missing = [m for m in MODULES if importlib.util.find_spec(m) is None]
    if missing:
        return f"not measured: {', '.join(missing)} missing"
    if not QUESTIONS.is_file():
        return f"not measured: {QUESTIONS} missing"
    if not (REPO / "models" / "build" / "minilm").is_dir():
        return "not measured: models/build/minilm missing (run `appliance models build`)"
    return None


def run(log) -> dict:
    import numpy as np

    from appliance.config import RouterSettings
    from appliance.encode import load_encoder
    from appliance.evaluate.router import cross_validate, evaluate_router
    from appliance.router import Router, build_router, load_questions
    from appliance.text import normalise_question

    bias, max_words = RouterSettings().bias, RouterSettings().max_words_small
    texts, labels, categories = load_questions(QUESTIONS)
    encoder = load_encoder("minilm", REPO / "models" / "build" / "minilm", threads=1)
    started = time.perf_counter()
    normalised = [normalise_question(t) for t in texts]
    embeddings = np.vstack([encoder.encode(normalised[i:i + 128]).dense for i in range(0, len(texts), 128)])
    encode_s = time.perf_counter() - started
    started = time.perf_counter()
    path = build_router(CACHE / "router", QUESTIONS, encoder)
    build_s = time.perf_counter() - started
    router = Router.load(path)
    in_sample = evaluate_router(router, texts, labels, embeddings, bias, max_words, categories=categories)
    out = {"questions": len(texts), "complex": int(sum(labels)), "bias": bias, "max_words_small": max_words,
           "encode_s": round(encode_s, 1), "build_s": round(build_s, 1), "router_file": str(path),
           "in_sample": _clean(in_sample)}
    log("  router: 5-fold cross-validation")
    cv = cross_validate(texts, labels, embeddings, encoder.name, folds=5, bias=bias, max_words_small=max_words,
                        categories=categories)
    out["cross_validated"] = _clean(cv)
    return out


def _clean(d: dict) -> dict:
    return {k: (round(v, 4) if isinstance(v, float) else _clean(v) if isinstance(v, dict) else v) for k, v in d.items()}
