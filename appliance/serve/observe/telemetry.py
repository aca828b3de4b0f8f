"""Where a finished request goes: Prometheus, one JSON log line, and (optionally) OpenTelemetry spans.

OpenTelemetry is an extra and off by default; it is imported only when enabled, uses its own TracerProvider (the
global one belongs to whoever embeds us, and vLLM may set one too), and sends nothing anywhere unless an exporter
is configured.
"""
from __future__ import annotations

import datetime as dt
import json
import logging
import time
from typing import Any

from ...config import TelemetrySettings
from .metrics import STAGES, Metrics, RequestRecord

log = logging.getLogger("appliance.serve")
request_log = logging.getLogger("appliance.requests")

_PARALLEL = ("bm25", "ann")  # run side by side, so they share a start


def layout(timings: dict[str, float]) -> list[tuple[str, float, float]]:
    """(stage, offset from the request start, duration), all in ms, for the known stages present but `total`.

    Only durations are measured, so stages are laid end to end in pipeline order; bm25 and ann overlap.
    """
    placed: list[tuple[str, float, float]] = []
    cursor, parallel_start = 0.0, None
    for stage in STAGES:
        ms = timings.get(stage)
        if stage == "total" or not isinstance(ms, (int, float)) or ms < 0:
            continue
        if stage in _PARALLEL:
            parallel_start = cursor if parallel_start is None else parallel_start
            placed.append((stage, parallel_start, float(ms)))
            cursor = max(cursor, parallel_start + ms)
        else:
            placed.append((stage, cursor, float(ms)))
            cursor += ms
    return placed


class Telemetry:
    def __init__(self, settings: TelemetrySettings, metrics: Metrics, exporter: Any = None) -> None:
        """`exporter` (an OpenTelemetry SpanExporter, e.g. InMemorySpanExporter) overrides settings.otel_exporter."""
        self.settings = settings
        self.metrics = metrics
        self.provider: Any = None
        self._tracer: Any = None
        if settings.otel:
            self.provider = _make_provider(settings, exporter)
            self._tracer = self.provider.get_tracer("appliance")

    def finish(self, record: RequestRecord) -> None:
        self.metrics.observe(record)
        if self.settings.request_log:
            request_log.info(log_line(record))
        if self._tracer is not None:
            try:
                self._spans(record)
            except Exception:  # tracing is an aid; it must never turn an answered request into a failure
                log.warning("could not record spans for request %s", record.request_id, exc_info=True)

    def shutdown(self) -> None:
        if self.provider is not None:
            self.provider.shutdown()  # flushes a batch processor first
            self.provider, self._tracer = None, None

    def _spans(self, record: RequestRecord) -> None:
        from opentelemetry import trace
        from opentelemetry.trace import Status, StatusCode

        placed = layout(record.timings)
        total = record.timings.get("total")
        if not isinstance(total, (int, float)) or total < 0:
            total = max((start + ms for _, start, ms in placed), default=0.0)
        started = record.started or time.time() - total / 1000.0
        start_ns = int(started * 1e9)
        root = self._tracer.start_span("appliance.request", start_time=start_ns, attributes=_attributes(record))
        if record.status >= 500 or record.error:
            root.set_status(Status(StatusCode.ERROR, record.error or f"HTTP {record.status}"))
        context = trace.set_span_in_context(root)
        for stage, offset, ms in placed:
            begin = start_ns + int(offset * 1e6)
            span = self._tracer.start_span(f"appliance.{stage}", context=context, start_time=begin,
                                           attributes={"appliance.request_id": record.request_id})
            span.end(end_time=begin + int(ms * 1e6))
        root.end(end_time=start_ns + int(total * 1e6))


def log_line(record: RequestRecord) -> str:
    started = record.started or time.time()
    entry: dict[str, Any] = {
        "ts": dt.datetime.fromtimestamp(started, dt.timezone.utc).isoformat(timespec="milliseconds")
        .replace("+00:00", "Z"),
        "request_id": record.request_id, "endpoint": record.endpoint, "tenant": record.tenant,
        "status": record.status, "cache": record.cache,
        "route": {"engine": record.route_engine, "requested": record.route_requested},
        "degraded": record.degraded, "finish_reason": record.finish_reason,
        "timings_ms": {k: round(v, 3) if isinstance(v, float) else v for k, v in record.timings.items()},
    }
    if record.error is not None:
        entry["error"] = record.error
    return json.dumps(entry, ensure_ascii=False, separators=(",", ":"))


def _attributes(record: RequestRecord) -> dict[str, Any]:
    values = {"appliance.request_id": record.request_id, "appliance.tenant": record.tenant,
              "appliance.endpoint": record.endpoint, "appliance.status": record.status,
              "appliance.cache": record.cache, "appliance.route.engine": record.route_engine,
              "appliance.route.requested": record.route_requested, "appliance.degraded": record.degraded,
              "appliance.finish_reason": record.finish_reason}
    return {k: v for k, v in values.items() if v is not None}  # OTel attributes may not be None


def _make_provider(settings: TelemetrySettings, exporter: Any) -> Any:
    try:
        from opentelemetry.sdk.resources import Resource
        from opentelemetry.sdk.trace import TracerProvider
        from opentelemetry.sdk.trace.export import BatchSpanProcessor, ConsoleSpanExporter, SimpleSpanProcessor
    except ImportError as exc:
        raise RuntimeError("telemetry.otel = true needs the OpenTelemetry SDK: "
                           "pip install 'rag-appliance[otel]'") from exc
    provider = TracerProvider(resource=Resource.create({"service.name": "rag-appliance"}))
    if exporter is not None:
        provider.add_span_processor(SimpleSpanProcessor(exporter))
    elif settings.otel_exporter == "console":
        provider.add_span_processor(SimpleSpanProcessor(ConsoleSpanExporter()))
    elif settings.otel_exporter == "otlp":
        if not settings.otel_endpoint:  # the exporter would otherwise fall back to localhost or $OTEL_* variables
            raise RuntimeError('telemetry.otel_exporter = "otlp" needs telemetry.otel_endpoint')
        try:
            from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
        except ImportError as exc:
            raise RuntimeError("telemetry.otel_exporter = \"otlp\" needs the OTLP exporter: "
                               "pip install 'rag-appliance[otel]'") from exc
        provider.add_span_processor(BatchSpanProcessor(OTLPSpanExporter(endpoint=settings.otel_endpoint)))
    elif settings.otel_exporter != "none":
        raise ValueError(f"unknown telemetry.otel_exporter {settings.otel_exporter!r}")
    return provider
