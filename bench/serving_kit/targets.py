"""The targets checked against this run's numbers; a target with no measurement is listed as such, never as met."""
from __future__ import annotations

CACHE = ("semantic cache: right hits >= GPTCache@0.8's, with wrong-hit share <= 1/3 of GPTCache@0.8's "
         "(same vectors, same pairs)")
LOAD = "end-to-end: the full appliance holds >= 5x the naive server's request rate at P99 <= 2 s with no errors"
GROUPS = [CACHE, LOAD]
NAMES = {"qqp_en": "QQP (English, MiniLM)", "afqmc_zh": "AFQMC (Chinese, USE)"}


def targets(r: dict) -> list[dict]:
    return _cache(r.get("cache")) + _load(r.get("load"))


def _cache(c: dict | None) -> list[dict]:
    if not c or "datasets" not in c:
        return [_verdict(CACHE, "not measured: part not run", None)]
    out = []
    for name, d in c["datasets"].items():
        chosen = d["ours"]
        for split in ("held_out", "all"):
            ours = chosen[split][d["chosen"]["check"]]
            g = d["gptcache"][split]["0.8"]
            share_ratio = ours["wrong_hit_share"] / g["wrong_hit_share"] if g["wrong_hit_share"] else None
            right_ok = ours["right_hits"] >= g["right_hits"]
            share_ok = share_ratio is not None and share_ratio <= 1 / 3
            out.append(_verdict(CACHE, f"{NAMES.get(name, name)}, {split.replace('_', '-')} pairs, ours at threshold "
                                f"{d['chosen']['threshold']} / late {d['chosen']['late_threshold']}: right hits "
                                f"{ours['right_hits']} vs {g['right_hits']} ({'met' if right_ok else 'NOT met'}); "
                                f"wrong-hit share {ours['wrong_hit_share']} vs {g['wrong_hit_share']} = "
                                f"{share_ratio:.2f}x ({'met' if share_ok else 'NOT met'})", right_ok and share_ok))
    return out


def _load(ld: dict | None) -> list[dict]:
    if not ld or "systems" not in ld:
        return [_verdict(LOAD, "not measured: " + (ld or {}).get("skipped", "part not run"), None)]
    full, naive = ld["systems"].get("full", {}), ld["systems"].get("naive", {})
    a, b = full.get("max_rate_held"), naive.get("max_rate_held")
    if "error" in full or "error" in naive or not full.get("steps") or not naive.get("steps"):
        return [_verdict(LOAD, f"not measured: {full.get('error') or naive.get('error') or 'no result'}", None)]
    if a is None:  # measured, and the full appliance held no step: the target is not met, whatever naive did
        return [_verdict(LOAD, f"full held no step (P99 {_p99s(full)}); naive held {b or 'no step'} (P99 "
                         f"{_p99s(naive)}); highest rate without errors at any latency: full "
                         f"{_error_free(full)} req/s, naive {_error_free(naive)} req/s", False)]
    if not b:
        lowest = min(s["rate"] for s in naive["steps"]) if naive.get("steps") else None
        return [_verdict(LOAD, f"full {a} req/s; naive held no step (lowest tried {lowest} req/s): no ratio", None)]
    return [_verdict(LOAD, f"{a / b:.2f}x (full {a} req/s vs naive {b} req/s)", a / b >= 5)]


def _p99s(system: dict) -> str:
    return ", ".join(f"{s['p99_ms']:.0f} ms at {s['rate']:g}/s" for s in system["steps"])


def _error_free(system: dict) -> float | None:
    """The highest rate of the unbroken run of error-free steps from the lowest, at any latency."""
    best = None
    for step in system["steps"]:
        if step["errors"]:
            break
        best = step["rate"]
    return best


def _verdict(group: str, measured: str, met: bool | None) -> dict:
    return {"group": group, "measured": measured, "met": None if met is None else bool(met)}
