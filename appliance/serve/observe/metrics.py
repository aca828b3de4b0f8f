"""Prometheus metrics for GET /metrics: per-stage latencies, outcomes, and the engines' own numbers.

Every `Metrics` owns a private registry: vLLM registers its metrics in the global one (and keeps only the last
engine's series when two share a process), and tests build several apps per process, which would collide there.
Engine series reuse vLLM's names with an `engine` label, so dashboards written for vLLM keep working.
"""
from __future__ import annotations

import logging
import math
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import PurePath
from typing import TYPE_CHECKING

from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, Counter, Histogram, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric

from ...timings import Stage
from .history import History

if TYPE_CHECKING:
    from ...generate import EngineStatus

log = logging.getLogger("appliance.metrics")

STAGES: tuple[Stage, ...] = tuple(Stage)  # one histogram series per stage, in pipeline order
_STAGE_SET = frozenset(STAGES)
# 0.5 ms (a cache lookup) .. 60 s (a long generation behind a queue)
BUCKETS = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 20.0, 30.0, 60.0)
REJECT_REASONS = ("unauthorized", "rate_limited", "overloaded", "too_large", "invalid", "slow_body",
                  "foreign_origin", "keys_unavailable")
_ANSWERING = frozenset({"ask", "chat"})  # endpoints that consult the answer cache and the router
# Prefix-cache hits move when any tenant's prompt repeats one sent before: read by another tenant, they tell it
# whether its guess at someone's prompt was asked already. Admins only.
ADMIN_ONLY = ("vllm:prefix_cache_", "appliance_prefix_cache_")


@dataclass(slots=True)
class RequestRecord:
    request_id: str
    endpoint: str  # "ask", "chat", "search"
    tenant: str | None
    status: int  # HTTP status sent
    cache: str = "none"  # "exact", "semantic", "none"
    route_engine: str | None = None  # "small" / "large" / None (retrieval-only or no generation)
    route_requested: str | None = None  # "auto" / "small" / "large"
    degraded: bool = False
    finish_reason: str | None = None
    grounding: str | None = None  # the answer's label from the check against its passages
    timings: dict[str, float] = field(default_factory=dict)  # stage -> ms; unknown keys are logged, not measured
    started: float = 0.0  # time.time() at arrival
    error: str | None = None


class Metrics:
    def __init__(self) -> None:
        self.registry = CollectorRegistry()  # no auto-describe: collect() runs only at scrape
        r = self.registry
        self._public = CollectorRegistry()  # the same series less ADMIN_ONLY's, for a tenant's key
        self._public.register(_Without(r, ADMIN_ONLY))
        self.stage_seconds = Histogram("appliance_stage_seconds", "Time spent per request stage", ["stage"],
                                       buckets=BUCKETS, registry=r)
        self.requests = Counter("appliance_requests", "Requests answered, by endpoint and HTTP status",
                                ["endpoint", "status"], registry=r)
        self.cache_hits = Counter("appliance_cache_hits", "Answer-cache outcomes for ask/chat (layer none = miss)",
                                  ["layer"], registry=r)
        self.routes = Counter("appliance_route_decisions", "Engine chosen per answered ask/chat (none = no generation)",
                              ["engine", "requested"], registry=r)
        self.grounding = Counter("appliance_answers_grounding", "Answers by their check against their passages "
                                 "(supported, partly, unsupported, not_checked)", ["label"], registry=r)
        self.degraded = Counter("appliance_degraded", "Requests answered in a degraded mode", ["endpoint"], registry=r)
        self.rejections = Counter("appliance_rejected", "Requests refused before any work", ["reason", "endpoint"],
                                  registry=r)
        self.queue_time = Histogram("vllm:request_queue_time_seconds", "Time a request waited in the engine queue",
                                    ["engine"], buckets=BUCKETS, registry=r)
        self.ttft = Histogram("vllm:time_to_first_token_seconds", "Time to the first generated token", ["engine"],
                              buckets=BUCKETS, registry=r)
        self.history = History(BUCKETS)  # the same figures, kept for the console's charts
        self._engines = _EngineCollector()
        self._gauges = _GaugeSources()
        r.register(self._engines)
        r.register(self._gauges)

    def observe(self, record: RequestRecord) -> None:
        timings = {stage: float(ms) for stage, ms in record.timings.items()
                   if stage in _STAGE_SET and isinstance(ms, (int, float)) and math.isfinite(ms) and ms >= 0}
        for stage, ms in timings.items():
            self.stage_seconds.labels(stage).observe(ms / 1000.0)
        self.requests.labels(record.endpoint, str(record.status)).inc()
        answering = record.endpoint in _ANSWERING
        self.history.request(record.endpoint, record.status, record.cache, record.degraded, timings, answering)
        # a refused or failed request never reached the cache or the router, so it says nothing about them
        if answering and record.status < 400:
            self.cache_hits.labels(record.cache or "none").inc()
            self.routes.labels(record.route_engine or "none", record.route_requested or "none").inc()
            if record.grounding is not None:
                self.grounding.labels(record.grounding).inc()
        if record.degraded:
            self.degraded.labels(record.endpoint).inc()

    def rejected(self, reason: str, endpoint: str) -> None:
        if reason not in REJECT_REASONS:
            raise ValueError(f"unknown rejection reason {reason!r}; expected one of {REJECT_REASONS}")
        self.rejections.labels(reason, endpoint).inc()
        self.history.rejected(reason)

    def engine_sample(self, engine: str, kind: str, seconds: float) -> None:
        if kind == "queue":
            self.queue_time.labels(engine).observe(seconds)
            self.stage_seconds.labels(Stage.QUEUE_WAIT).observe(seconds)
        elif kind == "ttft":
            self.ttft.labels(engine).observe(seconds)
            self.history.ttft(engine, seconds)
        else:
            raise ValueError(f"unknown engine sample kind {kind!r}; expected 'queue' or 'ttft'")

    def attach_engines(self, status: Callable[[], Mapping[str, EngineStatus]]) -> None:
        """`status()` is read at every scrape (e.g. `EngineSet.status`)."""
        self._engines.source = status

    def set_gauge_source(self, name: str, help: str, fn: Callable[[], float]) -> None:
        self._gauges.sources[name] = (help, fn)

    def render(self, admin: bool = True) -> tuple[bytes, str]:
        """`admin` False: without the series only admins see (ADMIN_ONLY)."""
        return generate_latest(self.registry if admin else self._public), CONTENT_TYPE_LATEST


class _EngineCollector:
    """Reads the engines at scrape time, so the numbers are as fresh as the stat loggers' last update."""

    def __init__(self) -> None:
        self.source: Callable[[], Mapping[str, EngineStatus]] | None = None

    def collect(self) -> Iterator[Metric]:
        engines: Mapping[str, EngineStatus] = {}
        if self.source is not None:
            try:
                engines = self.source() or {}
            except Exception:  # a scrape must survive an engine that is restarting or half built
                log.warning("engine status() failed during a scrape", exc_info=True)
        vllm_labels, own_labels = ["engine", "model_name"], ["engine"]
        running = GaugeMetricFamily("vllm:num_requests_running", "Requests running on the engine", labels=vllm_labels)
        waiting = GaugeMetricFamily("vllm:num_requests_waiting", "Requests waiting in the engine queue",
                                    labels=vllm_labels)
        kv = GaugeMetricFamily("vllm:kv_cache_usage_perc", "KV-cache usage, 1 = full", labels=vllm_labels)
        queries = CounterMetricFamily("vllm:prefix_cache_queries", "Prefix-cache queries, in tokens",
                                      labels=vllm_labels)
        hits = CounterMetricFamily("vllm:prefix_cache_hits", "Prefix-cache hits, in tokens", labels=vllm_labels)
        ratio = GaugeMetricFamily("appliance_prefix_cache_hit_ratio", "Prefix-cache hit tokens / queried tokens",
                                  labels=own_labels)
        up = GaugeMetricFamily("appliance_engine_up", "1 when the engine is up", labels=own_labels)
        restarts = CounterMetricFamily("appliance_engine_restarts", "Engine restarts since start", labels=own_labels)
        in_flight = GaugeMetricFamily("appliance_engine_in_flight", "Generations in flight on the engine",
                                      labels=own_labels)
        for role, info in engines.items():
            # a model by its name (the folder's), not its absolute path: labels are no map of the box's folders
            name, model = str(role), PurePath(str(info.model or "")).name
            up.add_metric([name], 1.0 if info.state == "up" else 0.0)
            for family, key, labels in ((running, "running", [name, model]), (waiting, "waiting", [name, model]),
                                        (kv, "kv_cache_usage", [name, model]),
                                        (queries, "prefix_cache_queries", [name, model]),
                                        (hits, "prefix_cache_hits", [name, model]),
                                        (ratio, "prefix_cache_hit_rate", [name]), (restarts, "restarts", [name]),
                                        (in_flight, "in_flight", [name])):
                value = _number(getattr(info, key, None))
                if value is not None:
                    family.add_metric(labels, value)
        yield from (f for f in (running, waiting, kv, queries, hits, ratio, up, restarts, in_flight) if f.samples)


class _Without:
    """Another registry's series, less those whose names start with one of `prefixes`."""

    def __init__(self, registry: CollectorRegistry, prefixes: tuple[str, ...]):
        self.registry, self.prefixes = registry, prefixes

    def collect(self) -> Iterator[Metric]:
        return (m for m in self.registry.collect() if not m.name.startswith(self.prefixes))


class _GaugeSources:
    """Server-level gauges read from a function at scrape time; one failing function drops only its own series."""

    def __init__(self) -> None:
        self.sources: dict[str, tuple[str, Callable[[], float]]] = {}

    def collect(self) -> Iterator[Metric]:
        for name, (help, fn) in list(self.sources.items()):
            try:
                value = _number(fn())
            except Exception:
                log.warning("gauge source %s failed during a scrape", name, exc_info=True)
                continue
            if value is not None:
                yield GaugeMetricFamily(name, help, value=value)


def _number(value: object) -> float | None:
    if isinstance(value, bool):
        return float(value)
    if isinstance(value, (int, float)) and math.isfinite(value):
        return float(value)
    return None
