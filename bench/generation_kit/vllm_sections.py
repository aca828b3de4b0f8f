"""The measurements made on the vLLM engine: concurrent throughput, continuous batching, prefix caching.

Every run starts from an empty prefix cache (`reset_prefix_cache()`), and within a run every prompt is distinct,
so a run gains from the cache only what a real server would: the system prefix its requests share.
"""
from __future__ import annotations

import asyncio
import time

from .engine import Contention, stream
from .measure import closed_loop, pct


async def warm_up(engine, prompt: list[int]) -> None:
    await stream(engine, prompt, 8)  # first-request costs (allocations, kernel selection) are not timed


async def throughput(engine, prompts: list[list[int]], clients: int, requests: int, max_tokens: int) -> dict:
    """Closed-loop clients, each streaming its request; latency to the last token, TTFT to the first."""
    await engine.reset_prefix_cache()
    cached: list[int] = []

    async def send(i: int) -> dict:
        out = await stream(engine, prompts[i % len(prompts)], max_tokens)
        cached.append(out["cached_tokens"] or 0)
        return out

    contention = Contention()
    result = await closed_loop(send, clients, requests)
    result.update(contention.stop(), cached_prompt_tokens_mean=round(sum(cached) / max(len(cached), 1), 1))
    return result


async def continuous_batching(engine, short: list[list[int]], long: list[list[int]], short_clients: int,
                              short_requests: int, short_tokens: int, long_tokens: int) -> dict:
    """Short requests alone, then the same short requests while `len(long)` long ones run (all sent at the same
    moment as the first short ones). The long ones still running when the last short one ends are aborted."""

    async def short_run() -> dict:
        async def send(i: int) -> dict:
            return await stream(engine, short[i % len(short)], short_tokens)
        return await closed_loop(send, short_clients, short_requests)

    await engine.reset_prefix_cache()
    contention = Contention()
    alone = await short_run()
    alone.update(contention.stop())

    await engine.reset_prefix_cache()
    progress = [0] * len(long)

    async def long_request(k: int) -> None:
        from vllm import SamplingParams
        from vllm.sampling_params import RequestOutputKind

        params = SamplingParams(max_tokens=long_tokens, temperature=0.0, ignore_eos=True,
                                output_kind=RequestOutputKind.DELTA)
        async for out in engine.generate({"prompt_token_ids": long[k]}, params, request_id=f"long-{k}-{time.time()}"):
            progress[k] += len(out.outputs[0].token_ids)

    contention = Contention()
    tasks = [asyncio.create_task(long_request(k)) for k in range(len(long))]
    mixed = await short_run()
    mixed.update(contention.stop())
    running = sum(not t.done() for t in tasks)
    for t in tasks:
        t.cancel()  # closing the stream aborts the request in the engine
    await asyncio.gather(*tasks, return_exceptions=True)
    mixed.update(long_requests=len(long), long_max_tokens=long_tokens, long_still_running_at_end=running,
                 long_tokens_generated=sum(progress))
    ratio = mixed["p99_ms"] / alone["p99_ms"] if alone["p99_ms"] else None
    return {"short_max_tokens": short_tokens, "short_clients": short_clients, "alone": alone, "mixed": mixed,
            "p99_ratio": round(ratio, 2) if ratio else None}


async def prefix_ttft(engine, prompts: list[list[int]], common: int, reps: int,
                      block_size: int | None = None) -> dict:
    """TTFT of single requests (one at a time) whose first `common` tokens are a shared system prefix.
    cold: the cache emptied before every request, so the prefix is prefilled each time (what a server without
    prefix caching does on every request); warm: the prefix prefilled once by an untimed request, then each
    request brings its own new question after it."""
    cold, cold_cached = [], []
    contention = Contention()
    for ids in prompts[1:reps + 1]:
        await engine.reset_prefix_cache()
        out = await stream(engine, ids, 1)
        cold.append(out["ttft_ms"])
        cold_cached.append(out["cached_tokens"] or 0)
    cold_load = contention.stop()
    await engine.reset_prefix_cache()
    await stream(engine, prompts[0], 1)  # fills the cache with the shared prefix
    warm, warm_cached = [], []
    contention = Contention()
    for ids in prompts[reps + 1:2 * reps + 1]:
        out = await stream(engine, ids, 1)
        warm.append(out["ttft_ms"])
        warm_cached.append(out["cached_tokens"] or 0)
    warm_load = contention.stop()
    lengths = [len(p) for p in prompts[1:2 * reps + 1]]
    res = {"shared_prefix_tokens": common, "block_size": block_size, "prompt_tokens_min": min(lengths),
           "prompt_tokens_max": max(lengths), "requests_each": reps,
           "cold": {"ttft_p50_ms": pct(cold, 50), "ttft_mean_ms": round(sum(cold) / len(cold), 1),
                    "ttft_p99_ms": pct(cold, 99), "cached_tokens_mean": round(sum(cold_cached) / len(cold), 1),
                    **cold_load},
           "warm": {"ttft_p50_ms": pct(warm, 50), "ttft_mean_ms": round(sum(warm) / len(warm), 1),
                    "ttft_p99_ms": pct(warm, 99), "cached_tokens_mean": round(sum(warm_cached) / len(warm), 1),
                    **warm_load}}
    res["warm_over_cold_p50"] = round(res["warm"]["ttft_p50_ms"] / res["cold"]["ttft_p50_ms"], 3)
    return res


async def tiny_speed(engine, prompts: list[list[int]], clients: list[int], requests_per_client: int,
                     max_tokens: int) -> dict:
    """Tokens/s of a tiny model at each concurrency (same prompts for bf16 and AWQ)."""
    out = {}
    for c in clients:
        out[str(c)] = await throughput(engine, prompts, c, c * requests_per_client, max_tokens)
    return out
