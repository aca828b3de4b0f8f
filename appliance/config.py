"""One typed settings object, read once at boot from a TOML file plus APPLIANCE_* environment variables.

Precedence: defaults < TOML file < environment. A section field `port` of `[server]` is set in the environment as
APPLIANCE_SERVER_PORT; a top-level field `data_dir` as APPLIANCE_DATA_DIR. Every wrong value is reported at once,
each with the name to fix, so a box that will not boot says why in one message.
"""
from __future__ import annotations

import dataclasses
import os
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
}
_POSITIVE = {
    ("server", "port"), ("server", "max_body_bytes"), ("server", "max_documents_per_request"),
    ("server", "ingest_wait_timeout_s"), ("encoder", "threads"), ("encoder", "max_batch"),
    ("encoder", "queue_size"), ("encoder", "max_length"), ("encoder", "ingest_batch"),
    ("index", "connectivity"), ("index", "expansion_add"), ("index", "expansion_search"),
    ("chunking", "max_words"), ("chunking", "max_chars_cjk"), ("retrieve", "default_k"), ("retrieve", "max_k"),
    ("retrieve", "rrf_k"), ("retrieve", "overfetch"), ("retrieve", "late_candidates"),
    ("retrieve", "search_threads"),
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


def _build(cls: type, raw: Mapping[str, Any], section: str, env: Mapping[str, str], errors: list[str]) -> Any:
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
            values[f.name] = _build(kind, sub, f.name, env, errors)
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
    return cls(**values)


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
    return errors


def _name(section: str, name: str) -> str:
    return f"{section}.{name}" if section else name
