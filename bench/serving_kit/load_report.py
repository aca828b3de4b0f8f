"""The load part's section of the report."""
from __future__ import annotations

LABELS = {"full": "(a) full appliance (defaults)", "naive": "(b) naive"}


def load_section(ld: dict | None) -> list[str]:
    head = ["## 2. End-to-end load on loopback", ""]
    if not ld or "systems" not in ld:
        return head + ["Not run" + (f": {ld['skipped']}" if ld and ld.get("skipped") else ".") + "", ""]
    mix = ", ".join(f"{k.replace('_', ' ')} {v:.0%}" for k, v in ld["mix"].items())
    w = ld["warmup"]
    lines = head + [
        "`python -m appliance serve` as a subprocess on 127.0.0.1 (free port), a fresh temp data dir, the built-in "
        "demo corpus (tenant `default`), `APPLIANCE_MODELS_DIR` = the repository's models; the load generator "
        "(asyncio + httpx, same machine) sends `POST /v1/ask` with `max_tokens` "
        f"{ld['max_tokens']}, open loop: Poisson arrivals at the offered rate for {ld['step_s']} s per step, each "
        "latency measured from the moment the request was due (a late send counts against the server) "
        + ("until its full JSON answer" if ld.get("latency", "total") == "total" else
           "until its first streamed token, or its final event if that comes first (`stream: true`; the P99 of the "
           "whole answer is in the total P99 column)")
        + f". Rates stepped {ld['rates']} req/s; a step is held when P99 <= {ld['p99_limit_ms'] / 1000:g} s and no "
        "errors (5xx, 429, other 4xx, transport errors or client timeouts); degraded (retrieval-only) 200s are "
        "allowed and counted. The highest rate held is the last of an unbroken run of held steps from the lowest; "
        f"stepping stops at the first step not held once {ld.get('min_steps', 1)} steps have run.", "",
        f"Request mix (seeded, the same sequence for both systems): {mix}. Before the steps a warm-up sends "
        f"{w['seed_pairs']} QQP duplicate-pair text_a questions, {w['simple']} simple and {w['complex']} complex "
        "router questions (4 at a time); exact repeats re-ask a warm-up question verbatim, paraphrases ask the "
        "text_b of a warm-up QQP pair, new questions come from router_questions (simple: NQ-open, then unused QQP "
        "questions; complex: HotpotQA, GSM8K, HumanEval) and are never repeated.", "",
        "| system | env | boot s | warm-up s | highest rate held (req/s) | cache-hit P50 ms | cache-hit P99 ms "
        "| hits |", "|---|---|---|---|---|---|---|---|"]
    for name, s in ld["systems"].items():
        env = " ".join(f"{k}={v}" for k, v in s.get("env", {}).items()) or "defaults"
        h = s.get("hits_all_steps", {})
        lines.append(f"| {LABELS.get(name, name)} | {env} | {s.get('boot_s')} | {s.get('warmup', {}).get('s')} | "
                     f"{s.get('max_rate_held')} | {h.get('p50_ms')} | {h.get('p99_ms')} | {h.get('n')} |")
    full, naive = ld["systems"].get("full", {}), ld["systems"].get("naive", {})
    if full.get("max_rate_held") and naive.get("max_rate_held"):
        lines += ["", f"Highest rate held, full / naive: **{full['max_rate_held'] / naive['max_rate_held']:.2f}x**."]
    for name, s in ld["systems"].items():
        lines += ["", f"### {LABELS.get(name, name)}", ""]
        if "error" in s:
            lines += [f"Failed: {s['error']}", "", "```", s.get("server_log_tail", ""), "```"]
        lines += ["| offered req/s | sent | errors | P50 ms | P99 ms | total P99 ms | degraded | exact hits | semantic hits | "
                  "hit P50 ms | hit P99 ms | new simple P99 | new complex P99 | repeat P99 | paraphrase P99 | "
                  "held | others (cores) |", "|---" * 17 + "|"]
        for st in s.get("steps", []):
            k = st["by_kind"]
            errs = ", ".join(f"{c}: {n}" for c, n in st["error_kinds"].items()) or "0"
            lines.append(f"| {st['rate']:g} | {st['sent']} | {errs} | {st['p50_ms']} | {st['p99_ms']} | "
                         f"{st.get('total_p99_ms')} | "
                         f"{st['degraded']} ({st['degraded'] / max(st['ok'], 1):.0%}) | {st['exact_hits']} | "
                         f"{st['semantic_hits']} | {st['hit_p50_ms']} | {st['hit_p99_ms']} | "
                         f"{k['new_simple']['p99_ms']} | {k['new_complex']['p99_ms']} | {k['exact_repeat']['p99_ms']} | "
                         f"{k['paraphrase']['p99_ms']} | {'yes' if st['held'] else 'no'} | {st.get('others_cores')} |")
        if s.get("stopped"):
            lines += ["", s["stopped"]]
    lines += ["", "Warm-up answers: " + "; ".join(f"{n}: {s.get('warmup')}" for n, s in ld["systems"].items()),
              "", "The load generator shares the 2 cores with the server; `others` = cores other processes (outside "
              "this benchmark and its server) used during the step.", ""]
    return lines
