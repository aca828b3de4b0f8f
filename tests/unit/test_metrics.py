"""Metrics and telemetry: the real prometheus-client exposition and the real OpenTelemetry SDK, no mocks."""
from __future__ import annotations

import json
import logging
import time
from dataclasses import replace

import pytest
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from prometheus_client.parser import text_string_to_metric_families

from appliance.config import TelemetrySettings
from appliance.generate import EngineStatus
from appliance.serve.observe.metrics import STAGES, Metrics, RequestRecord
from appliance.serve.observe.telemetry import Telemetry, layout

TIMINGS = {"exact_cache": 0.6, "encode": 4.0, "bm25": 3.0, "ann": 7.0, "fuse": 0.8, "route": 0.2,
           "prompt": 1.5, "ttft": 120.0, "generation": 800.0, "total": 940.0, "custom_step": 2.0}


def samples(metrics: Metrics) -> dict[tuple[str, frozenset], float]:
    """Parse the exposition the way a Prometheus server would: {(sample name, labels): value}."""
    body, content_type = metrics.render()
    assert content_type.startswith("text/plain")
    out = {}
    for family in text_string_to_metric_families(body.decode()):
        for s in family.samples:
            out[(s.name, frozenset(s.labels.items()))] = s.value
    return out


def value(parsed: dict, name: str, **labels: str) -> float | None:
    return parsed.get((name, frozenset(labels.items())))


def record(**kw) -> RequestRecord:
    base = dict(request_id="r-1", endpoint="ask", tenant="acme", status=200, timings=dict(TIMINGS),
                started=time.time() - 1.0)
    return RequestRecord(**{**base, **kw})


def test_observe_fills_stage_histograms_and_outcome_counters():
    m = Metrics()
    m.observe(record(cache="exact", route_engine=None, route_requested="auto"))
    m.observe(record(cache="none", route_engine="large", route_requested="auto", degraded=True))
    m.observe(record(endpoint="search", cache="none", route_engine=None, timings={"bm25": 2.0}))
    m.observe(record(status=500, cache="none"))  # failed: counted as a request, not as a cache miss
    p = samples(m)
    assert value(p, "appliance_stage_seconds_count", stage="encode") == 3
    assert value(p, "appliance_stage_seconds_sum", stage="encode") == pytest.approx(0.012)
    assert value(p, "appliance_stage_seconds_count", stage="bm25") == 4
    assert value(p, "appliance_stage_seconds_sum", stage="bm25") == pytest.approx(0.011)
    # 0.6 ms falls in the 1 ms bucket, not the 0.5 ms one
    assert value(p, "appliance_stage_seconds_bucket", stage="exact_cache", le="0.0005") == 0
    assert value(p, "appliance_stage_seconds_bucket", stage="exact_cache", le="0.001") == 3
    assert not any(k[0].startswith("appliance_stage") and ("stage", "custom_step") in k[1] for k in p)
    assert value(p, "appliance_requests_total", endpoint="ask", status="200") == 2
    assert value(p, "appliance_requests_total", endpoint="ask", status="500") == 1
    assert value(p, "appliance_requests_total", endpoint="search", status="200") == 1
    assert value(p, "appliance_cache_hits_total", layer="exact") == 1
    assert value(p, "appliance_cache_hits_total", layer="none") == 1  # search and the 500 are not counted
    assert value(p, "appliance_route_decisions_total", engine="none", requested="auto") == 1
    assert value(p, "appliance_route_decisions_total", engine="large", requested="auto") == 1
    assert value(p, "appliance_degraded_total", endpoint="ask") == 1


def test_rejected_counts_by_reason_and_refuses_unknown_reasons():
    m = Metrics()
    m.rejected("rate_limited", "ask")
    m.rejected("rate_limited", "ask")
    m.rejected("unauthorized", "search")
    p = samples(m)
    assert value(p, "appliance_rejected_total", reason="rate_limited", endpoint="ask") == 2
    assert value(p, "appliance_rejected_total", reason="unauthorized", endpoint="search") == 1
    with pytest.raises(ValueError):
        m.rejected("bored", "ask")


def test_engine_samples_feed_vllm_histograms_and_queue_wait_stage():
    m = Metrics()
    m.engine_sample("small", "queue", 0.25)
    m.engine_sample("small", "ttft", 0.08)
    m.engine_sample("large", "ttft", 1.5)
    p = samples(m)
    assert value(p, "vllm:request_queue_time_seconds_count", engine="small") == 1
    assert value(p, "vllm:request_queue_time_seconds_sum", engine="small") == pytest.approx(0.25)
    assert value(p, "appliance_stage_seconds_sum", stage="queue_wait") == pytest.approx(0.25)
    assert value(p, "vllm:time_to_first_token_seconds_count", engine="large") == 1
    assert value(p, "vllm:time_to_first_token_seconds_sum", engine="small") == pytest.approx(0.08)
    with pytest.raises(ValueError):
        m.engine_sample("small", "tpot", 0.01)


def engine_status(role: str, state: str, **over) -> EngineStatus:
    """What an engine reports in `EngineSet.status()`: identity fields plus its vLLM statistics."""
    status = EngineStatus(role=role, state=state, model=f"/srv/models/{role}-llm", device="cuda", dtype="bfloat16",
                          max_model_len=4096, in_flight=3, restarts=1, estimated_wait_s=0.5, start_s=12.5,
                          running=2, waiting=5, kv_cache_usage=0.42, prefix_cache_queries=1000,
                          prefix_cache_hits=250, prefix_cache_hit_rate=0.25, requests_finished=7, prompt_tokens=900,
                          generation_tokens=300, ttft_p50_ms=80.0, ttft_p99_ms=None, queue_p99_ms=None)
    return replace(status, **over)


def test_engine_collector_reads_status_at_scrape_time():
    m = Metrics()
    engines = {"small": engine_status("small", "up"), "large": engine_status("large", "down", running=0)}
    m.attach_engines(lambda: engines)
    p = samples(m)
    small = {"engine": "small", "model_name": "small-llm"}  # the model's name: no folder of the box in a label
    assert not any("/" in label for _, labels in p for _, label in labels)
    assert value(p, "vllm:num_requests_running", **small) == 2
    assert value(p, "vllm:num_requests_running", engine="large", model_name="large-llm") == 0
    assert value(p, "vllm:num_requests_waiting", **small) == 5
    assert value(p, "vllm:kv_cache_usage_perc", **small) == pytest.approx(0.42)
    assert value(p, "vllm:prefix_cache_queries_total", **small) == 1000
    assert value(p, "vllm:prefix_cache_hits_total", **small) == 250
    assert value(p, "appliance_prefix_cache_hit_ratio", engine="small") == pytest.approx(0.25)
    assert value(p, "appliance_engine_up", engine="small") == 1
    assert value(p, "appliance_engine_up", engine="large") == 0
    assert value(p, "appliance_engine_restarts_total", engine="small") == 1
    assert value(p, "appliance_engine_in_flight", engine="large") == 3
    engines["small"] = replace(engines["small"], running=9)  # read live, not cached at attach time
    assert value(samples(m), "vllm:num_requests_running", **small) == 9


def test_scrape_survives_failing_or_empty_sources():
    m = Metrics()
    m.observe(record())

    def broken() -> dict[str, EngineStatus]:
        raise RuntimeError("engine restarting")

    m.attach_engines(broken)
    m.set_gauge_source("appliance_in_flight_requests", "Requests in progress", lambda: 4)
    m.set_gauge_source("appliance_broken_gauge", "Always fails", lambda: 1 / 0)
    p = samples(m)
    assert value(p, "appliance_requests_total", endpoint="ask", status="200") == 1
    assert value(p, "appliance_in_flight_requests") == 4
    assert not any(k[0].startswith(("vllm:num_requests", "appliance_engine_up", "appliance_broken")) for k in p)
    m.attach_engines(lambda: {})
    assert not any(k[0].startswith("appliance_engine_up") for k in samples(m))


def test_each_metrics_instance_has_its_own_registry():
    a, b = Metrics(), Metrics()  # would raise "Duplicated timeseries" on a shared registry
    a.rejected("invalid", "ask")
    assert value(samples(a), "appliance_rejected_total", reason="invalid", endpoint="ask") == 1
    assert value(samples(b), "appliance_rejected_total", reason="invalid", endpoint="ask") is None


def test_request_log_is_one_json_line(caplog):
    telemetry = Telemetry(TelemetrySettings(), Metrics())
    with caplog.at_level(logging.INFO, logger="appliance.requests"):
        telemetry.finish(record(tenant="ünï", route_engine="small", route_requested="auto", finish_reason="stop",
                                started=1_700_000_000.25))
        telemetry.finish(record(request_id="r-2", status=503, error="engine down"))
    lines = [r.getMessage() for r in caplog.records if r.name == "appliance.requests"]
    assert len(lines) == 2 and all("\n" not in line for line in lines)
    assert "ünï" in lines[0]  # ensure_ascii=False
    entry = json.loads(lines[0])
    assert entry["ts"] == "2023-11-14T22:13:20.250Z"
    assert entry["request_id"] == "r-1" and entry["endpoint"] == "ask" and entry["status"] == 200
    assert entry["route"] == {"engine": "small", "requested": "auto"}
    assert entry["cache"] == "none" and entry["degraded"] is False and entry["finish_reason"] == "stop"
    assert entry["timings_ms"]["custom_step"] == 2.0 and entry["timings_ms"]["total"] == 940.0
    assert "error" not in entry
    assert json.loads(lines[1])["error"] == "engine down"


def test_request_log_can_be_turned_off(caplog):
    metrics = Metrics()
    telemetry = Telemetry(TelemetrySettings(request_log=False), metrics)
    with caplog.at_level(logging.INFO, logger="appliance.requests"):
        telemetry.finish(record())
    assert not [r for r in caplog.records if r.name == "appliance.requests"]
    assert value(samples(metrics), "appliance_requests_total", endpoint="ask", status="200") == 1


def test_layout_runs_bm25_and_ann_side_by_side():
    placed = {stage: (start, ms) for stage, start, ms in layout(TIMINGS)}
    assert "total" not in placed and "custom_step" not in placed
    assert placed["encode"] == (0.6, 4.0)
    assert placed["bm25"][0] == placed["ann"][0] == pytest.approx(4.6)
    assert placed["fuse"][0] == pytest.approx(4.6 + 7.0)  # after the longer of the two
    assert [s for s, _, _ in layout(TIMINGS)] == [s for s in STAGES if s in TIMINGS and s != "total"]


def test_otel_spans_one_per_stage_under_a_root():
    exporter = InMemorySpanExporter()
    telemetry = Telemetry(TelemetrySettings(otel=True), Metrics(), exporter=exporter)
    started = time.time() - 2.0
    telemetry.finish(record(request_id="req-42", cache="semantic", route_engine="small", route_requested="auto",
                            started=started))
    telemetry.shutdown()
    spans = {s.name: s for s in exporter.get_finished_spans()}
    stages = [s for s in STAGES if s in TIMINGS and s != "total"]
    assert set(spans) == {"appliance.request"} | {f"appliance.{s}" for s in stages}
    root = spans["appliance.request"]
    assert root.resource.attributes["service.name"] == "rag-appliance"
    assert root.attributes["appliance.request_id"] == "req-42"
    assert root.attributes["appliance.cache"] == "semantic"
    assert root.attributes["appliance.route.engine"] == "small"
    assert abs(root.start_time - int(started * 1e9)) < 1_000_000
    assert abs((root.end_time - root.start_time) / 1e6 - TIMINGS["total"]) < 1
    for stage in stages:
        span = spans[f"appliance.{stage}"]
        assert span.parent is not None and span.parent.span_id == root.context.span_id
        assert span.context.trace_id == root.context.trace_id
        assert span.attributes["appliance.request_id"] == "req-42"
        assert abs((span.end_time - span.start_time) / 1e6 - TIMINGS[stage]) < 1
    bm25, ann, fuse = spans["appliance.bm25"], spans["appliance.ann"], spans["appliance.fuse"]
    assert bm25.start_time == ann.start_time and bm25.end_time > ann.start_time  # overlapping
    assert fuse.start_time >= max(bm25.end_time, ann.end_time)
    assert spans["appliance.encode"].end_time <= bm25.start_time


def test_otel_marks_server_errors():
    exporter = InMemorySpanExporter()
    telemetry = Telemetry(TelemetrySettings(otel=True, request_log=False), Metrics(), exporter=exporter)
    telemetry.finish(record(status=500, error="boom", timings={"encode": 1.0}))
    root = next(s for s in exporter.get_finished_spans() if s.name == "appliance.request")
    assert not root.status.is_ok and root.status.description == "boom"
    assert abs((root.end_time - root.start_time) / 1e6 - 1.0) < 1  # no total: the stages' extent


def test_otel_off_makes_no_provider_and_otlp_needs_an_endpoint():
    telemetry = Telemetry(TelemetrySettings(otel=False), Metrics(), exporter=InMemorySpanExporter())
    assert telemetry.provider is None
    telemetry.finish(record())
    telemetry.shutdown()
    with pytest.raises(RuntimeError, match="otel_endpoint"):
        Telemetry(TelemetrySettings(otel=True, otel_exporter="otlp"), Metrics())


def test_a_tenant_scrape_has_no_prefix_cache_series():
    """Prefix-cache hits tell whether someone's prompt was seen before: rendered for admins only."""
    m = Metrics()
    m.attach_engines(lambda: {"small": engine_status("small", "up")})
    public, _ = m.render(admin=False)
    full, _ = m.render()
    assert b"prefix_cache" not in public and b"vllm:num_requests_running" in public
    assert b"vllm:prefix_cache_hits_total" in full and b"appliance_prefix_cache_hit_ratio" in full
