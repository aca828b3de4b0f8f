"""Per-engine statistics, fed by a vLLM stat logger.

vLLM's global Prometheus registry keeps only the last engine's series when two engines share a process
(MODELS.md), so each engine gets its own logger writing into its own `EngineStats`.
"""
from __future__ import annotations

import collections
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

WINDOW = 512  # recent samples kept for percentiles


@dataclass(slots=True)
class EngineStats:
    running: int = 0
    waiting: int = 0
    kv_cache_usage: float = 0.0
    prefix_cache_queries: int = 0  # tokens looked up in the prefix cache since start
    prefix_cache_hits: int = 0
    requests_finished: int = 0
    generation_tokens: int = 0
    prompt_tokens: int = 0
    ttft_s: collections.deque = field(default_factory=lambda: collections.deque(maxlen=WINDOW))
    queue_s: collections.deque = field(default_factory=lambda: collections.deque(maxlen=WINDOW))
    # Called with ("ttft" | "queue", seconds) for every sample, so a metrics exporter sees each one.
    listener: Callable[[str, float], None] | None = None

    @property
    def prefix_cache_hit_rate(self) -> float:
        return self.prefix_cache_hits / self.prefix_cache_queries if self.prefix_cache_queries else 0.0

    def snapshot(self) -> dict[str, Any]:
        return {
            "running": self.running, "waiting": self.waiting, "kv_cache_usage": round(self.kv_cache_usage, 4),
            "prefix_cache_queries": self.prefix_cache_queries, "prefix_cache_hits": self.prefix_cache_hits,
            "prefix_cache_hit_rate": round(self.prefix_cache_hit_rate, 4),
            "requests_finished": self.requests_finished, "prompt_tokens": self.prompt_tokens,
            "generation_tokens": self.generation_tokens,
            "ttft_p50_ms": _percentile_ms(self.ttft_s, 50), "ttft_p99_ms": _percentile_ms(self.ttft_s, 99),
            "queue_p99_ms": _percentile_ms(self.queue_s, 99),
        }


def _percentile_ms(samples, q: float) -> float | None:
    if not samples:
        return None
    ordered = sorted(samples)
    return round(ordered[min(len(ordered) - 1, int(len(ordered) * q / 100))] * 1000, 2)


def stat_logger_factory(stats: EngineStats):
    """A factory in the shape vLLM expects (`(vllm_config, engine_index) -> StatLoggerBase`)."""
    from vllm.v1.metrics.loggers import StatLoggerBase  # imported here: vLLM takes ~15 s to import

    class _Logger(StatLoggerBase):
        def __init__(self, vllm_config, engine_index: int = 0):
            self.stats = stats

        def record(self, scheduler_stats, iteration_stats, mm_cache_stats=None, engine_idx: int = 0):
            s = self.stats
            if scheduler_stats is not None:
                s.running = scheduler_stats.num_running_reqs
                s.waiting = scheduler_stats.num_waiting_reqs
                s.kv_cache_usage = scheduler_stats.kv_cache_usage
                prefix = scheduler_stats.prefix_cache_stats
                if prefix is not None:
                    s.prefix_cache_queries += prefix.queries
                    s.prefix_cache_hits += prefix.hits
            if iteration_stats is not None:
                s.generation_tokens += iteration_stats.num_generation_tokens
                s.prompt_tokens += iteration_stats.num_prompt_tokens
                s.ttft_s.extend(iteration_stats.time_to_first_tokens_iter)
                for finished in iteration_stats.finished_requests:
                    s.requests_finished += 1
                    s.queue_s.append(finished.queued_time)
                if s.listener is not None:
                    for ttft in iteration_stats.time_to_first_tokens_iter:
                        s.listener("ttft", ttft)
                    for finished in iteration_stats.finished_requests:
                        s.listener("queue", finished.queued_time)

        def log_engine_initialized(self):
            pass

    return _Logger
