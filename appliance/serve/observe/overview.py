"""The box at a glance, for the console's Overview: readiness, engines, caches, the last minutes' traffic and
latencies per stage (from the figures /metrics exports, kept by `History`), and partitions being indexed."""
from __future__ import annotations

from dataclasses import asdict
from pathlib import PurePath
from typing import TYPE_CHECKING, Any

from ..edge import BootState, Phase
from .history import Point
from .metrics import Metrics

if TYPE_CHECKING:
    from ...cache import CacheCounts
    from ...generate import EngineStatus
    from ...library import PartitionInfo
    from ...wiring import Services


def overview_json(boot: BootState, metrics: Metrics, in_flight: int, services: Services | None,
                  counts: CacheCounts | None) -> dict[str, Any]:
    """`services` None: still starting (or failed); the traffic figures are there all the same."""
    history = metrics.history
    window = history.window()
    ready = boot.phase is Phase.READY and services is not None
    body: dict[str, Any] = {
        "status": boot.phase.value, "error": boot.error, "in_flight": in_flight,
        "window_s": window.seconds, "step_s": history.step_s,
        "series": [_point_json(p) for p in history.series()],
        "totals": {"requests": window.requests, "degraded": window.degraded, "rejected": window.rejected},
        "caches": {"answers": window.cache, "hit_rate": _hit_rates(window.cache),
                   "entries": asdict(counts) if counts is not None else None},
        "engines": {}, "indexing": [],
    }
    if ready:
        body["boot_ms"], body["warm_up_ms"] = services.boot.boot_ms, services.boot.warm_up_ms
        body["engines"] = {role: _engine_json(s, window.ttft_ms.get(role))
                           for role, s in services.engines.status().items()}
        body["indexing"] = [_indexing_json(p) for p in services.library.partitions()
                            if p.indexed_version < p.version]
    return body


def _point_json(p: Point) -> dict[str, Any]:
    return {"t": p.t, "requests": p.requests, "rps": p.rps, "errors": p.errors, "degraded": p.degraded,
            "rejected": p.rejected, "p50_ms": p.p50_ms, "p99_ms": p.p99_ms}


def _hit_rates(answers: dict[str, int]) -> dict[str, float]:
    total = sum(answers.values())
    return {layer: round(n / total, 4) for layer, n in answers.items()} if total else {}


def _engine_json(s: EngineStatus, ttft: tuple[float, float] | None) -> dict[str, Any]:
    """The engine's own numbers; TTFT over the window where it answered in it, else vLLM's since start."""
    p50, p99 = ttft if ttft is not None else (s.ttft_p50_ms, s.ttft_p99_ms)
    return {"state": s.state, "model": PurePath(str(s.model or "")).name, "device": s.device, "dtype": s.dtype,
            "running": s.running, "waiting": s.waiting, "in_flight": s.in_flight,
            "kv_cache_usage": s.kv_cache_usage, "prefix_cache_hit_rate": s.prefix_cache_hit_rate,
            "ttft_p50_ms": p50, "ttft_p99_ms": p99, "ttft_over": "window" if ttft is not None else "start",
            "restarts": s.restarts, "requests_finished": s.requests_finished}


def _indexing_json(p: PartitionInfo) -> dict[str, Any]:
    return {"tenant": p.tenant, "partition": p.name, "version": p.version, "indexed_version": p.indexed_version}
