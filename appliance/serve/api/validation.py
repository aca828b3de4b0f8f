"""Request bodies: one `Spec` per body (derived from its declaration in requests.py) drives both validation and the
OpenAPI document.

Errors name the field (a JSON path such as `documents[3].text`) so a client can fix the request without guessing.
"""
from __future__ import annotations

import functools
import json
import math
import re
import sys
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

import numpy as np

from ...config import NAME_PATTERN
from ..http.errors import ApiError


@dataclass(slots=True, frozen=True)
class Spec:
    """A JSON value's shape: type, bounds, and for objects their fields, for arrays their items."""
    type: str  # string, integer, number, boolean, object, array, timestamp, any
    description: str = ""
    required: bool = False
    default: Any = None
    min: float | None = None
    max: float | None = None
    pattern: str | None = None
    fields: dict[str, "Spec"] = field(default_factory=dict)
    items: "Spec | None" = None
    free_form: bool = False  # an object whose keys are the client's own (metadata)
    blank: bool = True  # a string of only white space is acceptable
    choices: tuple = ()  # allowed values, when only a few are
    extra: bool = False  # an object may carry fields not listed (ignored): OpenAI clients send many


MAX_DEPTH = 64  # nesting of arrays and objects in a body; deeper would risk recursion limits further on
_SURROGATE_ESCAPE = re.compile(rb"\\u[dD][89a-fA-F]")


# Counting values before parsing, one window of the body at a time: numpy does the work and lets go of the GIL
# while it does, so the event loop runs between and during the steps (a regex step per token held it ~5 ms a time).
_WINDOW = 1 << 20
_BACKSLASHES = re.compile(rb"\\*")
_QUOTE, _BACKSLASH, _COMMA = ord('"'), ord("\\"), ord(",")
_OPENS, _CLOSES = (ord("["), ord("{")), (ord("]"), ord("}"))


def parse_json(raw: bytes, max_values: int) -> Any:
    """The body as JSON, or a 400 saying why not. Beyond what `json` itself refuses, this refuses what it accepts
    but the rest of the server cannot store or send back: NaN and Infinity, numbers beyond a double's range,
    integers too long for Python to convert, nesting deeper than MAX_DEPTH, and strings with unpaired UTF-16
    surrogates (\\ud800). A body of more than `max_values` values is a 413 before it is parsed."""
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise ApiError.bad_body(f"body is not valid UTF-8 (byte {exc.start})", "invalid_utf8") from None
    _count_values(raw, max_values)
    try:
        value = json.loads(text, parse_constant=_no_constant, parse_float=_finite_float)
    except json.JSONDecodeError as exc:
        raise ApiError.bad_body(f"body is not valid JSON: {exc.msg} at line {exc.lineno} column {exc.colno}") \
            from None
    except RecursionError:
        raise ApiError.bad_body(f"body is nested deeper than {MAX_DEPTH} levels") from None
    except ValueError:  # an integer longer than Python converts
        raise ApiError.bad_body(f"body has an integer of more than {sys.get_int_max_str_digits()} digits") from None
    if _SURROGATE_ESCAPE.search(raw) is not None:  # size and depth were checked before parsing
        _check_surrogates(value)
    return value


def _count_values(raw: bytes, limit: int) -> None:
    """Refuse a body with more than `limit` containers and items, or nested deeper than MAX_DEPTH, before
    json.loads sees it: json.loads holds the GIL for its whole run (seconds for a few MB of `[[],[],...]`), so
    even off the event loop it would stall every request. Counts `[`, `{` and `,` outside strings (a bound on the
    values); exact for any body json.loads would accept, and for the part of any other it would parse."""
    values = depth = start = 0
    inside = False  # the window starts inside a string
    while start < len(raw):
        end = min(len(raw), start + _WINDOW)
        if raw[end - 1] == _BACKSLASH:  # never part a backslash from what it escapes
            end = min(len(raw), _BACKSLASHES.match(raw, end).end() + 1)
        # escapes go first (left to right, as JSON reads them): every quote left opens or closes a string
        window = raw[start:end].replace(b"\\\\", b"__").replace(b'\\"', b"__")
        start = end
        chars = np.frombuffer(window, np.uint8)
        quoted = np.logical_xor.accumulate(chars == _QUOTE) ^ inside  # in a string (at a quote: after it)
        outside = ~quoted
        opens = ((chars == _OPENS[0]) | (chars == _OPENS[1])) & outside
        values += int(np.count_nonzero(opens)) + int(np.count_nonzero((chars == _COMMA) & outside))
        if values > limit:
            raise ApiError.too_many_values(limit)
        closes = ((chars == _CLOSES[0]) | (chars == _CLOSES[1])) & outside
        levels = depth + np.cumsum(opens.view(np.int8) - closes.view(np.int8), dtype=np.int32)
        if int(levels.max()) > MAX_DEPTH:
            raise ApiError.bad_body(f"body is nested deeper than {MAX_DEPTH} levels")
        depth, inside = int(levels[-1]), bool(quoted[-1])


def _no_constant(name: str) -> Any:
    raise ApiError.bad_body(f"body is not valid JSON: {name} is not a JSON number")


def _finite_float(text: str) -> float:
    value = float(text)
    if not math.isfinite(value):
        raise ApiError.bad_body(f"body has a number too large for a double: {text[:40]}")
    return value


def _check_surrogates(value: Any) -> None:
    stack = [value]
    while stack:
        item = stack.pop()
        if isinstance(item, dict):
            for key in item:
                _check_text(key)
            stack.extend(item.values())
        elif isinstance(item, list):
            stack.extend(item)
        elif isinstance(item, str):
            _check_text(item)


def _check_text(text: str) -> None:
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as exc:
        raise ApiError.bad_body(f"body has a string with an unpaired UTF-16 surrogate "
                                f"\\u{ord(text[exc.start]):04x}; text must be valid Unicode") from None


def validate(value: Any, spec: Spec, path: str = "") -> Any:
    """Return the value with defaults filled in, or raise ApiError naming the first wrong field."""
    where = path or "body"
    if spec.type == "object":
        return _object(value, spec, path, where)
    if spec.type == "array":
        if not isinstance(value, list):
            raise ApiError.invalid(f"must be an array, got {_type_name(value)}", where)
        _check_size(value, spec, where, "items")
        assert spec.items is not None
        return [validate(item, spec.items, f"{where}[{i}]") for i, item in enumerate(value)]
    if spec.type == "string":
        return _string(value, spec, where)
    if spec.type == "boolean":
        if not isinstance(value, bool):
            raise ApiError.invalid(f"must be true or false, got {_type_name(value)}", where)
        return value
    if spec.type in ("integer", "number"):
        return _number(value, spec, where)
    if spec.type == "timestamp":
        return _timestamp(value, where)
    if spec.type == "any":  # the route handler checks the shape
        return value
    raise AssertionError(f"unknown spec type {spec.type}")


def _object(value: Any, spec: Spec, path: str, where: str) -> dict:
    if not isinstance(value, dict):
        raise ApiError.invalid(f"must be an object, got {_type_name(value)}", where)
    if spec.free_form:
        _check_size(json.dumps(value, ensure_ascii=False), spec, where, "bytes when encoded")
        return value
    unknown = sorted(set(value) - set(spec.fields))
    if unknown and not spec.extra:
        raise ApiError.invalid(f"unknown field; allowed: {', '.join(sorted(spec.fields))}", _join(path, unknown[0]))
    out = {}
    for name, sub in spec.fields.items():
        if name not in value or value[name] is None:  # OpenAI clients send null for fields they leave unset
            if sub.required:
                raise ApiError.invalid("is required", _join(path, name))
            out[name] = sub.default
            continue
        out[name] = validate(value[name], sub, _join(path, name))
    return out


def _string(value: Any, spec: Spec, where: str) -> str:
    if not isinstance(value, str):
        raise ApiError.invalid(f"must be a string, got {_type_name(value)}", where)
    _check_size(value, spec, where, "characters")
    if not spec.blank and value and not value.strip():
        raise ApiError.invalid("must contain more than white space", where)
    if spec.pattern and not _regex(spec.pattern).search(value):
        raise ApiError.invalid(f"must match {spec.pattern}", where)
    if spec.choices and value not in spec.choices:
        raise ApiError.invalid(f"must be one of {', '.join(spec.choices)}, got {value!r}", where)
    return value


def _number(value: Any, spec: Spec, where: str) -> int | float:
    integer = spec.type == "integer"
    ok = isinstance(value, int) if integer else isinstance(value, (int, float))
    if isinstance(value, bool) or not ok or (isinstance(value, float) and not math.isfinite(value)):
        raise ApiError.invalid(f"must be {'an integer' if integer else 'a number'}, got {_type_name(value)}", where)
    if spec.min is not None and value < spec.min or spec.max is not None and value > spec.max:
        raise ApiError.invalid(f"must be between {_num(spec.min)} and {_num(spec.max)}, got {value}", where)
    return value


@functools.lru_cache(maxsize=64)
def _regex(pattern: str) -> re.Pattern:
    r"""A JSON Schema (ECMA 262) pattern as Python reads it: there `$` also matches before a final newline, which
    would let "name\n" through NAME_PATTERN, so an end anchor becomes `\Z`."""
    if pattern.endswith("$") and not pattern.endswith("\\$"):
        pattern = pattern[:-1] + r"\Z"
    return re.compile(pattern)


def _timestamp(value: Any, where: str) -> float:
    if isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value):
        return float(value)
    if isinstance(value, str):
        try:
            return datetime.fromisoformat(value.replace("Z", "+00:00")).timestamp()
        except (ValueError, OverflowError):  # not a date-time, or one outside what the platform can convert
            pass
    raise ApiError.invalid("must be seconds since the epoch or an ISO 8601 date-time", where)


def _check_size(value: Any, spec: Spec, where: str, unit: str) -> None:
    n = len(value)
    if spec.min is not None and n < spec.min:
        raise ApiError.invalid(f"must have at least {_num(spec.min)} {unit}" if spec.min > 1 else "must not be empty",
                               where)
    if spec.max is not None and n > spec.max:
        raise ApiError.invalid(f"must have at most {_num(spec.max)} {unit}, got {n}", where)


def _join(path: str, name: str) -> str:
    return f"{path}.{name}" if path else name


def _num(x: float | None) -> str:
    return "any" if x is None else str(int(x)) if float(x).is_integer() else str(x)


def _type_name(value: Any) -> str:
    return {dict: "an object", list: "an array", str: "a string", bool: "a boolean", int: "an integer",
            float: "a number", type(None): "null"}.get(type(value), type(value).__name__)


_ASCII_INT = re.compile(r"-?[0-9]{1,18}")


def int_param(raw: str | None, spec: Spec, where: str) -> int | None:
    """A query or path parameter read as an integer of `spec` (its default when absent). Only ASCII digits count:
    str.isdigit() also admits "²" and other digits that int() refuses, and more than 4300 digits int() refuses
    too; both would otherwise be a 500."""
    if raw is None:
        if spec.required:
            raise ApiError.invalid("is required", where)
        return spec.default
    if not _ASCII_INT.fullmatch(raw):
        raise ApiError.invalid(f"must be an integer of at most 18 digits, got {raw[:40]!r}", where)
    return validate(int(raw), spec, where)
