"""The issue's targets checked against this run's numbers. A target with no measurement is listed as such, never
as met; a quick run shows its figures but judges nothing."""
from __future__ import annotations

THROUGHPUT = "vLLM >= 5x the naive transformers server's throughput at 32 concurrent clients"
BATCHING = "continuous batching: short-request p99 mixed with long requests <= 2x alone"
PREFIX = "prefix caching: warm TTFT <= 0.3x cold (~1k-token shared prefix)"
GROUPS = [THROUGHPUT, BATCHING, PREFIX]


def targets(r: dict) -> list[dict]:
    out = _throughput(r.get("throughput")) + _batching(r.get("continuous_batching")) + _prefix(r.get("prefix_cache"))
    if r["meta"]["quick"]:
        for v in out:
            if v["met"] is not None:
                v["met"], v["note"] = None, "quick run: small counts, not judged"
    return out


def _throughput(t: dict | None) -> list[dict]:
    if not t or "skipped" in t:
        return [_verdict(THROUGHPUT, "not measured: " + (t or {}).get("skipped", "section not run"), None)]
    target = max(t["clients"])
    vllm = t["vllm"].get(str(target))
    out = []
    for mode in ("sequential", "static"):
        naive = t["naive"].get(mode, {}).get(str(target))
        if not vllm or not naive:
            out.append(_verdict(THROUGHPUT, f"{mode}: not measured at {target} clients", None))
            continue
        ratio = vllm["output_tok_s"] / naive["output_tok_s"]
        out.append(_verdict(THROUGHPUT, f"vs {mode} ({target} clients): {ratio:.2f}x ({vllm['output_tok_s']} vs "
                            f"{naive['output_tok_s']} output tok/s)", ratio >= 5 and target >= 32))
        if target < 32:
            out[-1]["met"], out[-1]["note"] = None, f"largest concurrency measured is {target}, not 32"
    return out


def _batching(c: dict | None) -> list[dict]:
    if not c or "skipped" in c:
        return [_verdict(BATCHING, "not measured: " + (c or {}).get("skipped", "section not run"), None)]
    alone, mixed = c["alone"]["p99_ms"], c["mixed"]["p99_ms"]
    v = _verdict(BATCHING, f"{c['p99_ratio']}x (short p99 {mixed} ms mixed vs {alone} ms alone)",
                 c["p99_ratio"] is not None and c["p99_ratio"] <= 2)
    if c["mixed"]["long_still_running_at_end"] < c["mixed"]["long_requests"]:
        v["note"] = (f"only {c['mixed']['long_still_running_at_end']} of {c['mixed']['long_requests']} long requests "
                     "were still running when the last short one finished")
    return [v]


def _prefix(p: dict | None) -> list[dict]:
    if not p or "skipped" in p:
        return [_verdict(PREFIX, "not measured: " + (p or {}).get("skipped", "section not run"), None)]
    ratio = p["warm_over_cold_p50"]
    return [_verdict(PREFIX, f"{ratio}x (TTFT p50 {p['warm']['ttft_p50_ms']} ms warm vs {p['cold']['ttft_p50_ms']} ms "
                     f"cold; {p['warm']['cached_tokens_mean']} prompt tokens from the cache when warm)", ratio <= 0.3)]


def _verdict(group: str, measured: str, met: bool | None) -> dict:
    return {"group": group, "measured": measured, "met": None if met is None else bool(met)}
