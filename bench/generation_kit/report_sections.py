"""The Markdown tables of each section (report.py puts the header, the load table and the verdicts around them)."""
from __future__ import annotations


def sections(r: dict) -> list[str]:
    return _throughput(r) + _batching(r.get("continuous_batching")) + _prefix(r.get("prefix_cache")) + \
        _bf16(r.get("bf16_check")) + _awq(r.get("awq")) + _router(r.get("router"))


def _v(x, unit: str = "") -> str:
    return "n/a" if x is None else f"{x}{unit}"


def _throughput(r: dict) -> list[str]:
    t = r.get("throughput", {})
    e = r.get("vllm", {}).get("engine", {})
    naive = r.get("naive", {})
    lines = ["## 1. vLLM engine vs a naive transformers server", "",
             "Closed loop: each client sends its next request when its previous one is answered; latency is from "
             "send to the last token. vLLM: `AsyncLLM`, requests streamed concurrently by asyncio clients, prefix "
             "cache emptied before each run (only the shared system prefix is reused within a run). transformers "
             "(`generate`, greedy, in its own process): *sequential* serves one request at a time in arrival "
             "order; *static* waits for a batch of as many requests as there are clients, left-pads them, one "
             "`generate` for all, answers all at once (with one client that is a batch of one: the sequential "
             "run). With this few requests per run, p99 is (nearly) the slowest request (numpy percentile over "
             "the few samples shown in the requests column).", ""]
    if e:
        lines += [f"vLLM engine: eager, {e.get('dtype')}, max_num_seqs {e.get('max_num_seqs')}, max_num_batched_tokens "
                  f"{e.get('max_num_batched_tokens')}, chunked prefill {e.get('chunked_prefill')}, prefix caching on, "
                  f"KV cache {e.get('kv_cache_bytes', 0) / 2**30:.2f} GiB (block {e.get('block_size')}), started in "
                  f"{e.get('start_s')} s.", ""]
    if naive.get("threads"):
        lines += [f"transformers: {naive.get('dtype')}, {naive.get('threads')} torch threads, attention "
                  f"{naive.get('attn_implementation')}, loaded in {naive.get('load_s')} s.", ""]
    lines += ["| system | serving | clients | requests | output tok/s | requests/s | p50 ms | p99 ms | TTFT p50 ms | "
              "others (cores) |", "|---|---|---|---|---|---|---|---|---|---|"]
    for c in map(str, t.get("clients", [])):
        for mode in ("sequential", "static"):
            run = t.get("naive", {}).get(mode, {}).get(c)
            if run:
                same = " (= sequential)" if run.get("same_as") else ""
                lines.append(f"| transformers | {mode}{same} | {c} | {run['requests']} | {run['output_tok_s']} | "
                             f"{run['req_s']} | {run['p50_ms']} | {run['p99_ms']} | | {run.get('others_cores')} |")
        run = t.get("vllm", {}).get(c)
        if run:
            lines.append(f"| vLLM | continuous batching | {c} | {run['requests']} | {run['output_tok_s']} | "
                         f"{run['req_s']} | {run['p50_ms']} | {run['p99_ms']} | {run.get('ttft_p50_ms')} | "
                         f"{run.get('others_cores')} |")
    for name in ("naive", "vllm"):
        if r.get(name, {}).get("error"):
            lines.append(f"\n{name} FAILED: {r[name]['error']}")
    if t.get("vllm") and t.get("naive"):
        lines += ["", "Output tokens/s, vLLM over transformers:", "", "| clients | vs sequential | vs static |",
                  "|---|---|---|"]
        for c in map(str, t["clients"]):
            v = t["vllm"].get(c, {}).get("output_tok_s")
            cells = []
            for mode in ("sequential", "static"):
                n = t["naive"].get(mode, {}).get(c, {}).get("output_tok_s")
                cells.append(f"{v / n:.2f}x" if v and n else "n/a")
            lines.append(f"| {c} | " + " | ".join(cells) + " |")
    if t.get("greedy_agreement"):
        agree = ", ".join(f"{a['same_leading_tokens']}/{a['of']}" for a in t["greedy_agreement"])
        lines += ["", f"Sanity check, greedy output of the first two prompts: identical leading tokens vLLM vs "
                  f"transformers {agree}. vLLM began: \"{t['sample_text']['vllm'][:160]}...\"; transformers: "
                  f"\"{t['sample_text']['transformers'][:160]}...\""]
    return lines + [""]


def _batching(c: dict | None) -> list[str]:
    lines = ["## 2. Continuous batching: short requests alone and mixed with long ones (vLLM)", ""]
    if not c or "alone" not in c:
        return lines + [(c or {}).get("skipped") or (c or {}).get("error") or "not measured", ""]
    m = c["mixed"]
    lines += [f"{c['alone']['requests']} short requests ({c['short_max_tokens']} output tokens, RAG prompts, "
              f"{c['short_clients']} closed-loop clients), first alone, then the same requests while "
              f"{m['long_requests']} long requests ({m['long_max_tokens']} output tokens, other RAG prompts) are sent "
              "at the same moment as the first short ones. Prefix cache emptied before each run.", "",
              "| short requests | p50 ms | p99 ms | max ms | TTFT p50 ms | others (cores) |",
              "|---|---|---|---|---|---|"]
    for k in ("alone", "mixed"):
        s = c[k]
        lines.append(f"| {k} | {s['p50_ms']} | {s['p99_ms']} | {s['max_ms']} | {s.get('ttft_p50_ms')} | "
                     f"{s.get('others_cores')} |")
    lines += ["", f"p99 mixed / alone: **{c['p99_ratio']}x**. Long requests still running when the last short one "
              f"finished: {m['long_still_running_at_end']} of {m['long_requests']} ({m['long_tokens_generated']} long "
              "tokens generated meanwhile; the rest were aborted)."]
    return lines + [""]


def _prefix(p: dict | None) -> list[str]:
    lines = ["## 3. Prefix caching: time to first token with a shared ~1k-token system prefix (vLLM)", ""]
    if not p or "cold" not in p:
        return lines + [(p or {}).get("skipped") or (p or {}).get("error") or "not measured", ""]
    lines += [f"One request at a time, 1 output token. Prompts: the appliance's system prefix plus fixed SciFact "
              f"abstracts as a standing reference, {p['shared_prefix_tokens']} tokens shared, then each its own "
              f"question ({p['prompt_tokens_min']}-{p['prompt_tokens_max']} tokens in all). Cold: the prefix cache "
              "emptied (`reset_prefix_cache`) before every request, as if caching were off; warm: the prefix "
              f"prefilled once by an untimed request, then {p['requests_each']} new questions.", "",
              "| | TTFT p50 ms | mean ms | p99 ms | prompt tokens from the cache (mean) | others (cores) |",
              "|---|---|---|---|---|---|"]
    for k in ("cold", "warm"):
        s = p[k]
        lines.append(f"| {k} | {s['ttft_p50_ms']} | {s['ttft_mean_ms']} | {s['ttft_p99_ms']} | "
                     f"{s['cached_tokens_mean']} | {s.get('others_cores')} |")
    block = p.get("block_size")
    note = (f" vLLM caches whole blocks of {block} tokens, so a warm request takes "
            f"{p['shared_prefix_tokens'] // block * block} of the {p['shared_prefix_tokens']} shared tokens from "
            "the cache and prefills the rest with its question." if block else "")
    return lines + ["", f"Warm / cold TTFT p50: **{p['warm_over_cold_p50']}x**.{note}", ""]


def _bf16(b: dict | None) -> list[str]:
    if not b:
        return []
    lines = ["## bf16 check: the same request in bf16 compute", ""]
    if "vllm" not in b:
        return lines + [b.get("error") or b.get("skipped") or "not measured", ""]
    h, v = b["transformers"], b["vllm"]
    lines += ["One request (the first prompt, same output length), one at a time, bf16 compute on both systems; "
              "compare with the 1-client rows above.", "",
              "| system | latency ms | output tok/s | TTFT ms | others (cores) |", "|---|---|---|---|---|",
              f"| transformers bf16 | {h['p50_ms']} | {h['output_tok_s']} | | {h.get('others_cores')} |",
              f"| vLLM bf16 | {v['latency_ms']} | {v['output_tok_s']} | {v['ttft_ms']} | {v.get('others_cores')} |"]
    return lines + [""]


def _awq(a: dict | None) -> list[str]:
    lines = ["## 4. AWQ 4-bit vs unquantized weights, tiny test model through vLLM", ""]
    if not a or "disk_bytes" not in a:
        return lines + [(a or {}).get("skipped") or (a or {}).get("error") or "not measured", ""]
    d, w = a["disk_bytes"], a["weights_bytes"]
    lines += [f"Random-weight Llama from `appliance.models.tiny.build_tiny_llm` (hidden {a['hidden']}, {a['layers']} "
              f"layers, {a['heads']} heads; {_built(a['build_s'])}), AWQ {a['bits']}-bit group {a['group_size']} by "
              f"`appliance.models.quantize.quantize_awq` on its default calibration texts "
              f"({_quantize_time(a)}).",
              "", "| weights | folder on disk | weight files |", "|---|---|---|",
              f"| unquantized (bf16) | {_mib(d['unquantized'])} | {_mib(w['unquantized'])} |",
              f"| AWQ | {_mib(d['awq'])} | {_mib(w['awq'])} |", ""]
    if a.get("quantize_error"):
        lines += [f"Quantization failed: {a['quantize_error']}", ""]
    lines += [f"Speed: {a['prompt_tokens']}-token prompts, {a['max_tokens']} output tokens, closed-loop clients.", "",
              "| weights | compute dtype | clients | requests | output tok/s | p50 ms | p99 ms | others (cores) |",
              "|---|---|---|---|---|---|---|---|"]
    for label, s in a.get("speed", {}).items():
        if "skipped" in s:
            lines.append(f"| {label} | | | | {s['skipped']} | | | |")
            continue
        for c, run in s.items():
            if c != "engine":
                lines.append(f"| {label} | {s['engine']['dtype']} | {c} | {run['requests']} | {run['output_tok_s']} | "
                             f"{run['p50_ms']} | {run['p99_ms']} | {run.get('others_cores')} |")
    return lines + [""]


def _router(x: dict | None) -> list[str]:
    lines = ["## 5. Router (small vs large model)", ""]
    if not x or "in_sample" not in x:
        return lines + [(x or {}).get("skipped") or (x or {}).get("error") or "not measured", ""]
    lines += [f"{x['questions']} labelled questions ({x['complex']} complex), MiniLM embeddings of "
              f"`normalise_question(text)` (encoded in {x['encode_s']} s), `build_router` ({x['build_s']} s), "
              f"`Router.load`, `evaluate_router` with bias {x['bias']} and max_words_small {x['max_words_small']}. "
              "In-sample = scored on the questions it was trained on; cross-validated = 5 folds, each question "
              "decided by a router that never saw it.", "",
              "| evaluation | simple -> small | complex -> large | small share at 80/20 traffic | p99 decision ms |",
              "|---|---|---|---|---|"]
    for label, key in (("in-sample", "in_sample"), ("cross-validated", "cross_validated")):
        e = x.get(key)
        if e:
            lines.append(f"| {label} | {e['simple_to_small']:.3f} | {e['complex_to_large']:.3f} | "
                         f"{e['small_share_80_20']:.3f} | {e['p99_decision_ms']:.3f} |")
    cats = (x.get("cross_validated") or {}).get("per_category")
    if cats:
        lines += ["", "Cross-validated share routed correctly per category: "
                  + ", ".join(f"{k} {v:.3f}" for k, v in cats.items()) + "."]
    return lines + [""]


def _built(build_s) -> str:
    return "cached from an earlier run" if build_s == "cached" else f"built in {build_s} s"


def _quantize_time(a: dict) -> str:
    q = a.get("quantize_s")
    if q is None:
        return "failed"
    if q != "cached":
        return f"quantized in {q} s, on the CPU, once: later runs reuse bench/.cache"
    first = a.get("quantize_first_run")
    return "cached from an earlier run" + (f" that quantized it in {first['quantize_s']} s" if first else "")


def _mib(n) -> str:
    return "n/a" if n is None else f"{n / 2**20:,.2f} MiB"
