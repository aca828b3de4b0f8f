"""Part 1a: right and wrong hits of our semantic cache against GPTCache on labelled pairs (the protocol of
appliance.cache.evaluate: store every text_a once, look up each text_b; a right hit is a duplicate pair answered
from its own text_a, every other hit is wrong), with our thresholds calibrated on a dev split only."""
from __future__ import annotations

import contextlib
import time

from appliance.config import CacheSettings

from . import gpt

THRESHOLDS = [0.7, 0.75, 0.8, 0.85, 0.9, 0.95]  # ours: cosine; a coarse grid, not to overfit
LATE = [0.0, 0.6, 0.7, 0.75, 0.8, 0.85]  # 0 = rules only (MiniLM; USE has no token vectors)
GPT_THRESHOLDS = [0.5, 0.6, 0.7, 0.75, 0.8, 0.85, 0.875, 0.9, 0.925, 0.95, 0.975]
GPT_DEFAULT = 0.8
WRONG_SHARE_FACTOR = 1 / 3  # target: our wrong-hit share <= 1/3 of GPTCache@0.8's


def splits(pairs) -> dict[str, list]:
    return {"dev": pairs[0::2], "held_out": pairs[1::2], "all": pairs}  # dev: even-numbered pairs (0-based)


@contextlib.contextmanager
def similarity_only():
    """Turn the second check off (verify.near_miss answers None) for the 'similarity only' rows."""
    from appliance.cache import semantic

    saved = semantic.near_miss
    semantic.near_miss = lambda *a, **k: None
    try:
        yield
    finally:
        semantic.near_miss = saved


def ours(pairs, vectors, threshold: float, late: float, check: str = "rules+late") -> dict:
    from appliance.cache.evaluate import evaluate_pairs
    from appliance.cache.semantic import SemanticParams

    params = SemanticParams(threshold=threshold, late_threshold=late if check == "rules+late" else 0.0,
                            max_entries=200_000, ttl_s=1e9, threshold_zh=threshold)  # a grid point is its cosine
    with similarity_only() if check == "similarity" else contextlib.nullcontext(), recording() as found:
        r = evaluate_pairs(pairs, vectors.encode, params)
    assert len(found) == len(pairs)
    return r | {"check": check} | breakdown(pairs, found)


@contextlib.contextmanager
def recording():
    """Note which question each lookup of evaluate_pairs found (None: a miss), for the wrong-hit breakdown."""
    from appliance.cache import evaluate

    found: list = []

    class Recording(evaluate.SemanticCache):
        def lookup(self, *args, **kwargs):
            result = super().lookup(*args, **kwargs)
            found.append(None if result.hit is None else result.hit.question)
            return result

    saved = evaluate.SemanticCache
    evaluate.SemanticCache = Recording
    try:
        yield found
    finally:
        evaluate.SemanticCache = saved


def breakdown(pairs, found: list) -> dict:
    """Wrong hits split: on a non-duplicate pair, or on a duplicate pair answered from another stored question
    (often itself a paraphrase in narrow-domain data such as AFQMC: the protocol still counts it wrong)."""
    return gpt.breakdown(pairs, found)


def choose(grid: list[dict], gpt_share: float) -> tuple[dict, str]:
    """Most right hits with wrong-hit share <= gpt_share/3 (ties: the stricter setting); none: lowest share."""
    limit = gpt_share * WRONG_SHARE_FACTOR
    ok = [r for r in grid if r["wrong_hit_share"] <= limit and r["right_hits"] > 0]
    if ok:
        best = max(ok, key=lambda r: (r["right_hits"], r["threshold"], r["late_threshold"]))
        return best, f"most right hits on dev with wrong-hit share <= {limit:.4f} (1/3 of GPTCache@0.8 on dev)"
    best = min((r for r in grid if r["right_hits"] > 0), key=lambda r: (r["wrong_hit_share"], -r["right_hits"]))
    return best, f"no setting reaches wrong-hit share <= {limit:.4f} on dev: the lowest share"


def gpt_best(sweep: dict, our_share: float) -> dict:
    rows = [r for k, r in sweep.items() if not k.startswith("direct")]
    matched = [r for r in rows if r["wrong_hit_share"] <= our_share and r["right_hits"] + r["wrong_hits"] > 0]
    return {"matched_share": max(matched, key=lambda r: r["right_hits"]) if matched else None,
            "max_net": max(rows, key=lambda r: (r["right_hits"] - r["wrong_hits"], r["threshold"]))}


def run(name: str, pairs, vectors, encoder: str, log) -> dict:
    started = time.perf_counter()
    parts = splits(pairs)
    has_tokens = vectors.tokens is not None
    checks = ["similarity", "rules"] + (["rules+late"] if has_tokens else [])
    out: dict = {"encoder": encoder, "dim": int(vectors.dense.shape[1]), "token_vectors": has_tokens,
                 "pairs": len(pairs), "duplicates": sum(p.label for p in pairs), "encode_s": vectors.encode_s,
                 "gptcache": {}}
    for split, subset in parts.items():
        out["gptcache"][split] = gpt.evaluate_sweep(subset, vectors, GPT_THRESHOLDS,
                                                    direct=GPT_DEFAULT if split == "all" else None)
        log(f"{name}: GPTCache sweep on {split} ({len(subset)} pairs) done")
    direct, derived = out["gptcache"]["all"][f"direct {GPT_DEFAULT}"], out["gptcache"]["all"][str(GPT_DEFAULT)]
    out["gptcache_derivation_check"] = all(direct[k] == derived[k] for k in ("right_hits", "wrong_hits"))
    grid = []
    for t in THRESHOLDS:
        grid.append(ours(parts["dev"], vectors, t, 0.0, "similarity"))
        grid.append(ours(parts["dev"], vectors, t, 0.0, "rules"))
        for late in (LATE[1:] if has_tokens else []):
            grid.append(ours(parts["dev"], vectors, t, late, "rules+late"))
    out["dev_grid"] = grid
    log(f"{name}: our dev grid ({len(grid)} settings) done")
    gpt_dev = out["gptcache"]["dev"][str(GPT_DEFAULT)]
    chosen, rule = choose([r for r in grid if r["check"] != "similarity"], gpt_dev["wrong_hit_share"])
    out["chosen"] = {"threshold": chosen["threshold"], "late_threshold": chosen["late_threshold"],
                     "check": chosen["check"], "rule": rule}
    # the rules+late row: the chosen late threshold, or the product's default where the chosen one is 0
    late_row = chosen["late_threshold"] or CacheSettings().semantic_late_threshold
    out["chosen"]["late_row"] = late_row
    out["ours"] = {}
    for split in ("held_out", "all"):
        out["ours"][split] = {c: ours(parts[split], vectors, chosen["threshold"],
                                      late_row if c == "rules+late" else chosen["late_threshold"], c)
                              for c in checks}
        best = gpt_best(out["gptcache"][split], out["ours"][split][chosen["check"]]["wrong_hit_share"])
        out["gptcache_best"] = out.get("gptcache_best", {}) | {split: best}
    out["seconds"] = round(time.perf_counter() - started, 1)
    log(f"{name}: chosen threshold {chosen['threshold']} late {chosen['late_threshold']} ({out['seconds']} s)")
    return out
