"""Reading the settings once at boot: a TOML file plus APPLIANCE_* environment variables, then validation.

Precedence: defaults < TOML file < environment. A section field `port` of `[server]` is set in the environment as
APPLIANCE_SERVER_PORT; a top-level field `data_dir` as APPLIANCE_DATA_DIR. Each value is checked against its
setting's declaration (`rules.setting`: bounds, choices, form), then the checks relating settings to each other
below. Every wrong value is reported at once, each with the name to fix, so a box that will not boot says why in
one message.
"""
from __future__ import annotations

import dataclasses
import os
import re
import tomllib
import types
import typing
from pathlib import Path
from typing import Any, Mapping

from .cluster import ClusterBox
from .rules import problems, rule_of
from .sections import ENGINE_ROLES, EngineSettings, ParseSettings, Settings

ENV_PREFIX = "APPLIANCE_"


class ConfigError(ValueError):
    """Raised with every problem found in the settings, one per line."""


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


def _declared_errors(section_name: str, section: Any) -> list[str]:
    """Every setting of a section (and of the sections it holds) checked against its own declaration."""
    errors = []
    for f in dataclasses.fields(section):
        value, rule = getattr(section, f.name), rule_of(f)
        if rule is not None:
            errors.extend(f"{_name(section_name, f.name)}: {problem}" for problem in rule.problems(value))
        elif dataclasses.is_dataclass(value):
            errors.extend(_declared_errors(f.name, value))
    return errors


def _index_errors(index) -> list[str]:
    if min(index.codebook_sample, index.codebook_min_tokens) < 16 * index.codebook_centroids:
        return ["index.codebook_sample and codebook_min_tokens: at least 16 tokens per centroid "
                f"({16 * index.codebook_centroids} for {index.codebook_centroids} centroids)"]
    return []


def _parse_errors(parse: ParseSettings) -> list[str]:
    errors = []
    if parse.max_file_bytes > parse.max_upload_bytes:
        errors.append("parse.max_file_bytes: must not exceed parse.max_upload_bytes")
    if not problems(parse, "spool_tenant_share") and \
            parse.spool_max_bytes * parse.spool_tenant_share < parse.max_upload_bytes:
        errors.append("parse.spool_max_bytes: its tenant share must hold at least one upload of "
                      "parse.max_upload_bytes")
    return errors


def _validate(settings: Settings) -> list[str]:
    """The declared rule of every setting, then what relates several settings to each other."""
    errors = _declared_errors("", settings)
    chunking = settings.chunking
    if chunking.overlap_words >= chunking.max_words:
        errors.append("chunking.overlap_words: must be below chunking.max_words")
    if chunking.overlap_chars_cjk >= chunking.max_chars_cjk:
        errors.append("chunking.overlap_chars_cjk: must be below chunking.max_chars_cjk")
    if settings.retrieve.default_k > settings.retrieve.max_k:
        errors.append("retrieve.default_k: must not exceed retrieve.max_k")
    errors.extend(_index_errors(settings.index))
    errors.extend(_parse_errors(settings.parse))
    if bool(settings.server.tls_cert_file) != bool(settings.server.tls_key_file):
        errors.append("server.tls_cert_file and server.tls_key_file: set both (HTTPS) or neither")
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
        if engine.max_num_batched_tokens < engine.max_model_len:
            errors.append(f"{name}.max_num_batched_tokens: must be at least {name}.max_model_len")
        if engine.max_tokens >= engine.max_model_len:
            errors.append(f"{name}.max_tokens: must be below {name}.max_model_len")
    if settings.generate.enabled and not (settings.small.enabled or settings.large.enabled):
        errors.append("small.enabled/large.enabled: at least one engine must be on while generate.enabled = true")
    share = settings.small.gpu_memory_utilization + settings.large.gpu_memory_utilization
    if settings.generate.device == "gpu" and share >= 0.95:
        errors.append(f"small/large.gpu_memory_utilization: the two shares sum to {share:.2f}; must be below 0.95")
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


def _name(section: str, name: str) -> str:
    return f"{section}.{name}" if section else name
