"""Section 5: the small/large router (appliance.generate.router) on the labelled questions.

The router is trained with the product's own `build_router` (MiniLM embeddings of the normalised questions), read
back with `Router.load`, and scored with `evaluate_router` on the same questions (in-sample), and, where the
module has it, with `cross_validate` (every question decided by a router that never saw it: the honest figure).
"""
from __future__ import annotations

import importlib.util
import time

from .data import CACHE, QUESTIONS, REPO


def available() -> str | None:
    if importlib.util.find_spec("appliance.generate.router") is None:
        return "not measured: appliance/generate/router.py missing"
    from appliance.generate import router

    need = ("load_questions", "Router", "build_router", "evaluate_router", "normalise_question")
    missing = [n for n in need if not hasattr(router, n)]
    if missing:
        return f"not measured: appliance.generate.router lacks {', '.join(missing)}"
    if not QUESTIONS.is_file():
        return f"not measured: {QUESTIONS} missing"
    if not (REPO / "models" / "build" / "minilm").is_dir():
        return "not measured: models/build/minilm missing (run `appliance models build`)"
    return None


def run(log) -> dict:
    import numpy as np

    from appliance.encode import load_encoder
    from appliance.generate import router as r

    try:
        from appliance.config import RouterSettings
        bias, max_words = RouterSettings().bias, RouterSettings().max_words_small
    except ImportError:
        bias, max_words = 0.0, 60
    texts, labels, categories = r.load_questions(QUESTIONS)
    encoder = load_encoder("minilm", REPO / "models" / "build" / "minilm", threads=1)
    started = time.perf_counter()
    normalised = [r.normalise_question(t) for t in texts]
    embeddings = np.vstack([encoder.encode(normalised[i:i + 128]).dense for i in range(0, len(texts), 128)])
    encode_s = time.perf_counter() - started
    started = time.perf_counter()
    path = r.build_router(CACHE / "router", QUESTIONS, encoder)
    build_s = time.perf_counter() - started
    router = r.Router.load(path)
    kwargs = {"categories": categories} if "categories" in r.evaluate_router.__code__.co_varnames else {}
    in_sample = r.evaluate_router(router, texts, labels, embeddings, bias, max_words, **kwargs)
    out = {"questions": len(texts), "complex": int(sum(labels)), "bias": bias, "max_words_small": max_words,
           "encode_s": round(encode_s, 1), "build_s": round(build_s, 1), "router_file": str(path),
           "in_sample": _clean(in_sample)}
    if hasattr(r, "cross_validate"):
        log("  router: 5-fold cross-validation")
        cv = r.cross_validate(texts, labels, embeddings, encoder.name, folds=5, bias=bias,
                              max_words_small=max_words, **kwargs)
        out["cross_validated"] = _clean(cv)
    return out


def _clean(d: dict) -> dict:
    return {k: (round(v, 4) if isinstance(v, float) else _clean(v) if isinstance(v, dict) else v) for k, v in d.items()}
