"""Reading the settings once at boot: a TOML file plus APPLIANCE_* environment variables, then validation.

Precedence: defaults < TOML file < environment. A section field `port` of `[server]` is set in the environment as
APPLIANCE_SERVER_PORT; a top-level field `data_dir` as APPLIANCE_DATA_DIR. Every wrong value is reported at once,
each with the name to fix, so a box that will not boot says why in one message.
"""
from __future__ import annotations

import dataclasses
import ipaddress
import os
import re
import tomllib
import types
import typing
from pathlib import Path
from typing import Any, Mapping

from .cluster import ClusterBox
from .sections import ENGINE_ROLES, MAX_FUSION_WEIGHT, EngineSettings, ParseSettings, Settings

ENV_PREFIX = "APPLIANCE_"


class ConfigError(ValueError):
    """Raised with every problem found in the settings, one per line."""


_CHOICES = {
    ("encoder", "model"): {"", "minilm", "use"},
    ("encoder", "en"): {"minilm", "use"},
    ("encoder", "zh"): {"minilm", "use"},
    ("encoder", "multi"): {"minilm", "use"},
    ("encoder", "graph"): {"auto", "int8", "fp32"},
    ("index", "dtype"): {"f16", "f32", "bf16", "i8"},
    ("index", "metric"): {"cos", "ip", "l2sq"},
    ("index", "token_codec"): {"residual", "int8"},
    ("index", "token_bits"): {1, 2, 4, 8},
    ("", "log_level"): {"debug", "info", "warning", "error"},
    ("generate", "device"): {"auto", "cpu", "gpu"},
    ("small", "quantization"): {"", "awq", "awq_marlin", "gptq", "fp8"},
    ("large", "quantization"): {"", "awq", "awq_marlin", "gptq", "fp8"},
    ("small", "dtype"): {"auto", "bfloat16", "float16", "float32"},
    ("large", "dtype"): {"auto", "bfloat16", "float16", "float32"},
    ("telemetry", "otel_exporter"): {"none", "console", "otlp"},
    ("cache", "semantic"): {"auto", "on", "off"},
    ("conversation", "standalone"): {"auto", "raw", "history", "expand", "rewrite"},
    ("conversation", "followup"): {"expand", "rewrite"},
    ("generate", "answer_mode"): {"generate", "extractive"},
    ("generate", "unsupported"): {"label", "quote", "refuse"},
}
_HOST_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9\-]*(\.[A-Za-z0-9\-]+)*\.?")  # a DNS name or IPv4 address
_ENGINE_POSITIVE = ("max_model_len", "max_num_seqs", "max_num_batched_tokens", "kv_cache_gib", "max_tokens",
                    "max_waiting")
_POSITIVE = {
    ("server", "port"), ("server", "max_body_bytes"), ("server", "max_documents_per_request"),
    ("server", "ingest_wait_timeout_s"), ("server", "max_query_body_bytes"), ("server", "max_chat_body_bytes"),
    ("server", "max_chat_message_chars"), ("server", "max_chat_chars"), ("server", "max_json_values"),
    ("server", "json_workers"), ("parse", "workers"), ("parse", "timeout_s"), ("parse", "max_file_bytes"),
    ("parse", "max_upload_bytes"), ("parse", "max_files_per_request"), ("parse", "max_unpacked_bytes"),
    ("parse", "spool_max_bytes"),
    ("parse", "max_parts"), ("parse", "max_pages"), ("conversation", "rewrite_max_tokens"),
    ("conversation", "rewrite_timeout_s"), ("encoder", "threads"), ("encoder", "max_batch"),
    ("encoder", "queue_size"), ("encoder", "max_length"), ("encoder", "ingest_batch"),
    ("index", "connectivity"), ("index", "expansion_add"), ("index", "expansion_search"), ("index", "max_token_shards"),
    ("index", "codebook_centroids"), ("index", "codebook_min_tokens"), ("index", "codebook_sample"),
    ("index", "reindex_per_tenant"), ("index", "reindex_queued"),
    ("chunking", "max_words"), ("chunking", "max_chars_cjk"), ("chunking", "max_chars"), ("retrieve", "default_k"), ("retrieve", "max_k"),
    ("retrieve", "rrf_k"), ("retrieve", "overfetch"), ("retrieve", "late_candidates"),
    ("retrieve", "search_threads"), ("generate", "passages"), ("generate", "context_tokens"),
    ("generate", "max_tokens_cited"), ("generate", "max_tokens_concise"), ("router", "max_words_small"),
    ("server", "request_timeout_s"), ("server", "drain_timeout_s"), ("cache", "memory_items"),
    ("cache", "disk_mib"), ("cache", "ttl_s"), ("cache", "embedding_items"), ("cache", "embedding_mib"), ("cache", "semantic_max_entries"),
    ("cache", "single_flight_wait_s"), ("admission", "rate_per_s"), ("admission", "burst"),
    ("admission", "max_in_flight"), ("admission", "wait_budget_s"), ("server", "body_timeout_s"),
    ("server", "body_min_bytes_per_s"), ("server", "max_connections"), ("server", "keep_alive_s"),
    ("cluster", "sync_timeout_s"), ("cluster", "pull_interval_s"), ("cluster", "catch_up_timeout_s"),
    *((engine, name) for engine in ("small", "large") for name in _ENGINE_POSITIVE),
}


def load_settings(path: str | Path | None = None, env: Mapping[str, str] | None = None) -> Settings:
    """Read the TOML file (if any) and the environment, validate, and return the settings."""
    env = os.environ if env is None else env
    path = path or env.get(ENV_PREFIX + "CONFIG")
    raw: dict[str, Any] = {}
    if path:
        try:
            raw = tomllib.loads(Path(path).read_text(encoding="utf-8"))
        except FileNotFoundError:
            raise ConfigError(f"config file not found: {path}") from None
        except tomllib.TOMLDecodeError as exc:
            raise ConfigError(f"config file {path} is not valid TOML: {exc}") from None
    errors: list[str] = []
    settings = _build(Settings, raw, "", env, errors)
    if not errors:
        errors.extend(_validate(settings))
    if not errors and settings.cluster.boxes:
        members = _read_boxes(Path(settings.cluster.boxes), settings.cluster.self, errors)
        settings = dataclasses.replace(settings, cluster=dataclasses.replace(settings.cluster, members=members))
    if errors:
        raise ConfigError("invalid settings:\n  " + "\n  ".join(errors))
    return settings


def _build(cls: type, raw: Mapping[str, Any], section: str, env: Mapping[str, str], errors: list[str],
           default: Any = None) -> Any:
    hints = typing.get_type_hints(cls)
    known = {f.name for f in dataclasses.fields(cls)}
    for unknown in sorted(set(raw) - known):
        errors.append(f"{_name(section, unknown)}: unknown setting")
    values: dict[str, Any] = {}
    for f in dataclasses.fields(cls):
        kind = hints[f.name]
        if dataclasses.is_dataclass(kind):
            sub = raw.get(f.name, {})
            if not isinstance(sub, Mapping):
                errors.append(f"{f.name}: must be a table")
                sub = {}
            start = f.default_factory() if f.default_factory is not dataclasses.MISSING else kind()
            values[f.name] = _build(kind, sub, f.name, env, errors, start)
            continue
        env_key = ENV_PREFIX + (f"{section}_{f.name}" if section else f.name).upper()
        if env_key in env:
            value, origin = env[env_key], env_key
        elif f.name in raw:
            value, origin = raw[f.name], _name(section, f.name)
        else:
            continue
        try:
            values[f.name] = _coerce(value, kind)
        except (TypeError, ValueError) as exc:
            errors.append(f"{origin}: {exc}")
    return dataclasses.replace(default, **values) if default is not None else cls(**values)


def _coerce(value: Any, kind: Any) -> Any:
    if isinstance(kind, types.UnionType) or typing.get_origin(kind) is typing.Union:
        kind = next(k for k in typing.get_args(kind) if k is not type(None))
    if typing.get_origin(kind) is tuple:  # a TOML list, or in the environment a comma-separated string
        items = value.split(",") if isinstance(value, str) else value
        if not isinstance(items, (list, tuple)) or not all(isinstance(i, str) for i in items):
            raise ValueError(f"expected a list of strings, got {value!r}")
        return tuple(i.strip() for i in items if i.strip())
    if kind is bool:
        if isinstance(value, bool):
            return value
        text = str(value).strip().lower()
        if text in {"1", "true", "yes", "on"}:
            return True
        if text in {"0", "false", "no", "off"}:
            return False
        raise ValueError(f"expected true or false, got {value!r}")
    if kind is int:
        if isinstance(value, bool) or (isinstance(value, float) and not value.is_integer()):
            raise ValueError(f"expected an integer, got {value!r}")
        try:
            return int(value)
        except ValueError:
            raise ValueError(f"expected an integer, got {value!r}") from None
    if kind is float:
        if isinstance(value, bool):
            raise ValueError(f"expected a number, got {value!r}")
        try:
            return float(value)
        except ValueError:
            raise ValueError(f"expected a number, got {value!r}") from None
    if kind is Path:
        if not isinstance(value, str) or not value:
            raise ValueError(f"expected a path, got {value!r}")
        return Path(value)
    if kind is str:
        if not isinstance(value, str):
            raise ValueError(f"expected a string, got {value!r}")
        return value
    raise TypeError(f"unsupported setting type {kind!r}")


def _index_errors(index) -> list[str]:
    errors = []
    if index.warm_max_mib < 0:
        errors.append("index.warm_max_mib: must be 0 (no index files read at warm-up) or more")
    if index.codebook_centroids > 65_536:
        errors.append("index.codebook_centroids: at most 65536 (a token's centroid is stored in 2 bytes)")
    if min(index.codebook_sample, index.codebook_min_tokens) < 16 * index.codebook_centroids:
        errors.append("index.codebook_sample and codebook_min_tokens: at least 16 tokens per centroid "
                      f"({16 * index.codebook_centroids} for {index.codebook_centroids} centroids)")
    return errors


def _parse_errors(parse: ParseSettings) -> list[str]:
    errors = []
    if parse.max_memory_mib < 0:
        errors.append("parse.max_memory_mib: must be 0 (unlimited) or more")
    if parse.max_file_bytes > parse.max_upload_bytes:
        errors.append("parse.max_file_bytes: must not exceed parse.max_upload_bytes")
    if not 0 < parse.spool_tenant_share <= 1:
        errors.append("parse.spool_tenant_share: must be above 0 and at most 1")
    elif parse.spool_max_bytes * parse.spool_tenant_share < parse.max_upload_bytes:
        errors.append("parse.spool_max_bytes: its tenant share must hold at least one upload of "
                      "parse.max_upload_bytes")
    return errors


def _validate(settings: Settings) -> list[str]:
    errors = []
    for (section, name), allowed in _CHOICES.items():
        value = getattr(getattr(settings, section) if section else settings, name)
        if value not in allowed:
            errors.append(f"{_name(section, name)}: {value!r} is not one of {sorted(allowed)}")
    for section, name in _POSITIVE:
        value = getattr(getattr(settings, section), name)
        if value <= 0:
            errors.append(f"{_name(section, name)}: must be greater than 0, got {value}")
    if settings.server.port > 65535:
        errors.append(f"server.port: must be at most 65535, got {settings.server.port}")
    for host in settings.server.allowed_hosts:
        if not (_HOST_NAME.fullmatch(host) or _is_ipv6(host)):
            errors.append(f"server.allowed_hosts: {host!r} is not a host name or IP address (no scheme or port)")
    for name in ("dense_weight", "dense_weight_zh", "other_language_weight"):
        if not 0 <= getattr(settings.retrieve, name) <= MAX_FUSION_WEIGHT:
            errors.append(f"retrieve.{name}: must be between 0 and {MAX_FUSION_WEIGHT:g}")
    if not 0 <= settings.retrieve.late_weight_zh <= 1:
        errors.append("retrieve.late_weight_zh: must be from 0 (off) to 1 (MaxSim order alone)")
    if settings.encoder.batch_window_ms < 0:
        errors.append("encoder.batch_window_ms: must be 0 or more")
    if not 0 <= settings.chunking.overlap_words < settings.chunking.max_words:
        errors.append("chunking.overlap_words: must be at least 0 and below chunking.max_words")
    if not 0 <= settings.chunking.overlap_chars_cjk < settings.chunking.max_chars_cjk:
        errors.append("chunking.overlap_chars_cjk: must be at least 0 and below chunking.max_chars_cjk")
    if settings.retrieve.default_k > settings.retrieve.max_k:
        errors.append("retrieve.default_k: must not exceed retrieve.max_k")
    if not 0 < settings.cache.semantic_threshold <= 1:
        errors.append("cache.semantic_threshold: must be above 0 and at most 1")
    if not 0 <= settings.cache.semantic_late_threshold <= 1:
        errors.append("cache.semantic_late_threshold: must be from 0 (off) to 1")
    if not 0 < settings.cache.semantic_threshold_zh <= 1:
        errors.append("cache.semantic_threshold_zh: must be above 0 and at most 1")
    if not 0 <= settings.cache.semantic_max_term_difference_zh <= 1:
        errors.append("cache.semantic_max_term_difference_zh: must be from 0 to 1 (1: off)")
    if not 0 <= settings.cache.semantic_max_unknown <= 1:
        errors.append("cache.semantic_max_unknown: must be from 0 to 1")
    if settings.conversation.rewrite_engine not in ENGINE_ROLES:
        errors.append(f"conversation.rewrite_engine: {settings.conversation.rewrite_engine!r} is not one of "
                      f"{list(ENGINE_ROLES)}")
    if settings.conversation.history_turns < 0 or settings.conversation.history_tokens < 0:
        errors.append("conversation.history_turns and history_tokens: must be 0 (no history) or more")
    errors.extend(_index_errors(settings.index))
    errors.extend(_parse_errors(settings.parse))
    if bool(settings.server.tls_cert_file) != bool(settings.server.tls_key_file):
        errors.append("server.tls_cert_file and server.tls_key_file: set both (HTTPS) or neither")
    for name in ("max_documents", "max_partitions", "max_text_bytes", "max_file_bytes"):
        if getattr(settings.quota, name) < 0:
            errors.append(f"quota.{name}: must be 0 (unlimited) or more")
    if settings.telemetry.otel_exporter == "otlp" and not settings.telemetry.otel_endpoint:
        errors.append("telemetry.otel_endpoint: must be set when telemetry.otel_exporter = \"otlp\"")
    errors.extend(_validate_engines(settings))
    errors.extend(_cluster_errors(settings.cluster))
    return errors


def _cluster_errors(cluster) -> list[str]:
    if not cluster.boxes:
        return [] if not cluster.self else ["cluster.self: set without cluster.boxes (the file listing the boxes)"]
    errors = [f"cluster.{name}: required with cluster.boxes" for name in ("self", "secret_file")
              if not getattr(cluster, name)]
    if cluster.ca_file and not Path(cluster.ca_file).is_file():
        errors.append(f"cluster.ca_file: {cluster.ca_file} is not a file")
    if cluster.drain_grace_s < 0:
        errors.append("cluster.drain_grace_s: must be 0 or more")
    return errors


def _validate_engines(settings: Settings) -> list[str]:
    errors = []
    for name in ENGINE_ROLES:
        engine: EngineSettings = getattr(settings, name)
        if not 0 < engine.gpu_memory_utilization < 0.95:
            errors.append(f"{name}.gpu_memory_utilization: must be between 0 and 0.95")
        if not re.fullmatch(r"\d+(-\d+)?(,\d+(-\d+)?)*", engine.cpu_cores):
            errors.append(f"{name}.cpu_cores: {engine.cpu_cores!r} is not a core list such as 0, 0-3 or 0,2")
        if engine.speculative_ngram_tokens < 0:
            errors.append(f"{name}.speculative_ngram_tokens: must be 0 (off) or more")
        if engine.max_num_batched_tokens < engine.max_model_len:
            errors.append(f"{name}.max_num_batched_tokens: must be at least {name}.max_model_len")
        if not 0 < engine.context_share <= 1:
            errors.append(f"{name}.context_share: must be above 0 and at most 1")
        if not 0 <= engine.frequency_penalty <= 2:
            errors.append(f"{name}.frequency_penalty: must be from 0 to 2")
        if engine.max_tokens >= engine.max_model_len:
            errors.append(f"{name}.max_tokens: must be below {name}.max_model_len")
    if settings.generate.enabled and not (settings.small.enabled or settings.large.enabled):
        errors.append("small.enabled/large.enabled: at least one engine must be on while generate.enabled = true")
    share = settings.small.gpu_memory_utilization + settings.large.gpu_memory_utilization
    if settings.generate.device == "gpu" and share >= 0.95:
        errors.append(f"small/large.gpu_memory_utilization: the two shares sum to {share:.2f}; must be below 0.95")
    if not 0 <= settings.generate.temperature <= 2:
        errors.append("generate.temperature: must be between 0 and 2")
    return errors


_BOX_NAME = re.compile(r"[a-z0-9][a-z0-9_-]{0,62}")  # goes into HAProxy's configuration and a response header
_BOX_URL = re.compile(r"https?://[A-Za-z0-9.\-]+(:\d{1,5})?/?")


def load_boxes(path: Path) -> tuple[ClusterBox, ...]:
    """A boxes file on its own (for tools that print a site's configuration); ConfigError if it is wrong."""
    errors: list[str] = []
    boxes = _read_boxes(Path(path), None, errors)
    if errors:
        raise ConfigError("\n".join(errors))
    return boxes


def _read_boxes(path: Path, self_name: str | None, errors: list[str]) -> tuple[ClusterBox, ...]:
    """The site's boxes, from a TOML file of [[box]] tables (`name`, `url`), the same file on every box."""
    where = f"cluster.boxes ({path})"
    try:
        raw = tomllib.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        errors.append(f"{where}: file not found")
        return ()
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as exc:
        errors.append(f"{where}: not valid TOML: {exc}")
        return ()
    entries = raw.get("box")
    if not isinstance(entries, list) or not entries or set(raw) - {"box"}:
        errors.append(f"{where}: expected [[box]] tables (name, url) and nothing else")
        return ()
    boxes: list[ClusterBox] = []
    for number, entry in enumerate(entries, 1):
        name, url = (entry.get("name"), entry.get("url")) if isinstance(entry, dict) else (None, None)
        if set(entry if isinstance(entry, dict) else ()) - {"name", "url"}:
            errors.append(f"{where}: box {number}: only `name` and `url` are known")
        elif not isinstance(name, str) or not _BOX_NAME.fullmatch(name):
            errors.append(f"{where}: box {number}: `name` must be lowercase letters, digits, - or _ (up to 63)")
        elif not isinstance(url, str) or not _BOX_URL.fullmatch(url):
            errors.append(f"{where}: box {number} ({name}): `url` must be http://host:port or https://host:port")
        elif any(b.name == name for b in boxes):
            errors.append(f"{where}: box {name!r} listed twice")
        else:
            boxes.append(ClusterBox(name, url.rstrip("/")))
    if boxes and self_name is not None and self_name not in {b.name for b in boxes}:
        errors.append(f"cluster.self: {self_name!r} is not a box of {path} ({', '.join(b.name for b in boxes)})")
    return tuple(boxes)


def _is_ipv6(text: str) -> bool:
    try:
        return isinstance(ipaddress.ip_address(text), ipaddress.IPv6Address)
    except ValueError:
        return False


def _name(section: str, name: str) -> str:
    return f"{section}.{name}" if section else name
