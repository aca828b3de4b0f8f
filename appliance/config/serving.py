"""The server's sections: HTTP limits and timeouts, admission (keys, rates), tenant quotas, telemetry."""
from __future__ import annotations

from dataclasses import dataclass

from .rules import HOST, setting


@dataclass(slots=True, frozen=True)
class ServerSettings:
    host: str = setting("127.0.0.1", why="the address the server listens on (loopback: this machine only)")
    port: int = setting(8080, above=0, maximum=65535, why="the TCP port the server listens on")
    max_body_bytes: int = setting(
        16 * 1024 * 1024, above=0,
        why="a document upload; the other routes have their own, smaller limits")
    max_query_body_bytes: int = setting(64 * 1024, above=0, why="a search: a query and a few options")
    max_chat_body_bytes: int = setting(
        256 * 1024, above=0,
        why="a chat or an ask with history: OpenAI clients resend the whole conversation every time")
    max_chat_message_chars: int = setting(
        32_000, above=0,
        why="one chat message's text (only the last user message is answered)")
    max_chat_chars: int = setting(128_000, above=0, why="all of a chat's messages together")
    max_json_values: int = setting(
        50_000, above=0,
        why="Arrays, objects and their items in one body, counted before it is parsed: a value costs far more to "
            "parse than its bytes (2 MB of `[0,0,...]` held the event loop for seconds; 50,000 empty arrays parse "
            "in ~50 ms on a loaded 2-core box), so the count bounds the work. 1,000 documents with 40 metadata "
            "values each fit.")
    json_workers: int = setting(
        2, above=0,
        why="bodies parsed and validated at once, off the event loop; a flood queues behind them")
    allowed_hosts: tuple[str, ...] = setting(
        (), form=HOST,
        why="Host names (or IPs) clients may use besides loopback and `host` itself; a request naming another Host, "
            "or sent by a web page from another origin, is refused (DNS rebinding, cross-site POSTs).")
    max_documents_per_request: int = setting(1000, above=0, why="documents in one ingest request's body")
    ingest_wait_timeout_s: float = setting(
        300.0, above=0,
        why="Ingest requests wait until their documents are searchable unless the client asks otherwise.")
    request_timeout_s: float = setting(
        120.0, above=0,
        why="an answer still generating after this ends with finish_reason \"deadline\"")
    drain_timeout_s: float = setting(30.0, above=0, why="on shutdown, streams in progress get this long to finish")
    body_timeout_s: float = setting(
        10.0, above=0,
        why="A request body may take body_timeout_s plus 1 s per body_min_bytes_per_s received; slower gets 408, so "
            "a client trickling its body cannot hold a slot (uvicorn itself has no body-read timeout).")
    body_min_bytes_per_s: int = setting(65536, above=0, why="the slowest a body may arrive (see body_timeout_s)")
    max_connections: int = setting(
        512, above=0,
        why="Open connections (idle keep-alive ones included) past which uvicorn answers 503 (its "
            "limit_concurrency): bounds sockets and memory; twice admission.max_in_flight, well under the usual "
            "1024 open-file limit.")
    keep_alive_s: float = setting(5.0, above=0, why="an idle keep-alive connection is closed after this")
    tls_cert_file: str = setting(
        "",
        why="HTTPS on the box itself (PEM files): for a site whose boxes and balancer talk TLS (cluster.ca_file)")
    tls_key_file: str = setting("", why="the private key of tls_cert_file (PEM); set both or neither")
    forwarded_allow_ips: str = setting(
        "",
        why="Proxies whose X-Forwarded-For is believed (uvicorn's forwarded_allow_ips, comma-separated). Empty: "
            "none, so a client cannot pick the address that open mode's per-client bucket and share are keyed by.")


@dataclass(slots=True, frozen=True)
class AdmissionSettings:
    keys_file: str = setting(
        "",
        why="TOML with [[keys]] entries (sha256 of the key, tenant); \"\" = no API keys (open, logged)")
    rate_per_s: float = setting(
        50.0, above=0,
        why="Sustained requests per second of a token bucket per tenant, applied only while another tenant competes "
            "(slots.py): it keeps tenants from each other, and does not refuse a lone tenant work the box has room "
            "for.")
    burst: int = setting(100, above=0, why="and how many may come at once (the bucket's size; see rate_per_s)")
    max_in_flight: int = setting(
        256, above=0,
        why="Requests in progress in the whole server; past it 503 + Retry-After. A quarter is kept for tenants "
            "that arrive; one tenant holds at most max(1, (max_in_flight - max_in_flight // 4) // tenants "
            "competing).")
    wait_budget_s: float = setting(
        30.0, above=0,
        why="Estimated wait for an engine's first token above this: answer retrieval-only (extractive) instead of "
            "queueing. With 3 questions at once the default 1.5B model's first token came after 12.8 s (p50) on 2 "
            "AVX2-only cores with 512 passage tokens (bench/results/answers_context_512.md; none degraded) and 7.0 s "
            "on 2 cores with native bf16 and 1,024 (answers.md), so 30 s admits ~3 at a time on either; with 1,024 "
            "on the AVX2 cores 29 of 32 degraded. 4 s (the budget with SmolLM2) degraded every answer but the first.")


@dataclass(slots=True, frozen=True)
class QuotaSettings:
    """Per tenant, so that one tenant cannot fill the box's disk or memory for the others; 0 = unlimited."""
    max_documents: int = setting(0, minimum=0, notes={0: "unlimited"}, why="documents the tenant may hold")
    max_partitions: int = setting(0, minimum=0, notes={0: "unlimited"}, why="partitions the tenant may have")
    max_text_bytes: int = setting(
        0, minimum=0, notes={0: "unlimited"},
        why="UTF-8 bytes of stored chunks (overlaps included)")
    max_file_bytes: int = setting(
        0, minimum=0, notes={0: "unlimited"},
        why="bytes of kept original files, each distinct file (sha256) counted once per tenant")


@dataclass(slots=True, frozen=True)
class TelemetrySettings:
    request_log: bool = setting(True, why="one JSON line per request on the `appliance.requests` logger")
    otel: bool = setting(False, why="OpenTelemetry spans per stage (needs the `otel` extra)")
    otel_exporter: str = setting(
        "none", choices=("none", "console", "otlp"),
        why="none (spans made, not sent), console, or otlp (to otel_endpoint only)")
    otel_endpoint: str = setting("", why="e.g. http://127.0.0.1:4318/v1/traces; nothing is sent anywhere unless set")
