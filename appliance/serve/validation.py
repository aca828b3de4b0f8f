"""Request bodies: one declarative spec per body drives both validation and the OpenAPI document.

Errors name the field (a JSON path such as `documents[3].text`) so a client can fix the request without guessing.
"""
from __future__ import annotations

import json
import math
import re
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

NAME_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9_.\-]{0,127}$"


class BadRequest(Exception):
    def __init__(self, message: str, field: str | None = None, status: int = 422, code: str = "invalid_request"):
        super().__init__(message)
        self.message, self.field, self.status, self.code = message, field, status, code

    def body(self) -> dict:
        error = {"code": self.code, "message": self.message}
        if self.field:
            error["field"] = self.field
        return {"error": error}


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


def parse_json(raw: bytes) -> Any:
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise BadRequest(f"body is not valid UTF-8 (byte {exc.start})", status=400, code="invalid_utf8") from None
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        raise BadRequest(f"body is not valid JSON: {exc.msg} at line {exc.lineno} column {exc.colno}",
                         status=400, code="invalid_json") from None


def validate(value: Any, spec: Spec, path: str = "") -> Any:
    """Return the value with defaults filled in, or raise BadRequest naming the first wrong field."""
    where = path or "body"
    kind = spec.type
    if kind == "object":
        if not isinstance(value, dict):
            raise BadRequest(f"must be an object, got {_type_name(value)}", where)
        if spec.free_form:
            _check_size(json.dumps(value, ensure_ascii=False), spec, where, "bytes when encoded")
            return value
        unknown = sorted(set(value) - set(spec.fields))
        if unknown and not spec.extra:
            raise BadRequest(f"unknown field; allowed: {', '.join(sorted(spec.fields))}", _join(path, unknown[0]))
        out = {}
        for name, sub in spec.fields.items():
            if name not in value or value[name] is None:
                if sub.required:
                    raise BadRequest("is required", _join(path, name))
                out[name] = sub.default
                continue
            out[name] = validate(value[name], sub, _join(path, name))
        return out
    if kind == "array":
        if not isinstance(value, list):
            raise BadRequest(f"must be an array, got {_type_name(value)}", where)
        _check_size(value, spec, where, "items")
        assert spec.items is not None
        return [validate(item, spec.items, f"{where}[{i}]") for i, item in enumerate(value)]
    if kind == "string":
        if not isinstance(value, str):
            raise BadRequest(f"must be a string, got {_type_name(value)}", where)
        _check_size(value, spec, where, "characters")
        if not spec.blank and value and not value.strip():
            raise BadRequest("must contain more than white space", where)
        if spec.pattern and not re.match(spec.pattern, value):
            raise BadRequest(f"must match {spec.pattern}", where)
        if spec.choices and value not in spec.choices:
            raise BadRequest(f"must be one of {', '.join(spec.choices)}, got {value!r}", where)
        return value
    if kind == "boolean":
        if not isinstance(value, bool):
            raise BadRequest(f"must be true or false, got {_type_name(value)}", where)
        return value
    if kind in ("integer", "number"):
        ok = isinstance(value, int) if kind == "integer" else isinstance(value, (int, float))
        if isinstance(value, bool) or not ok or (isinstance(value, float) and not math.isfinite(value)):
            raise BadRequest(f"must be {'an integer' if kind == 'integer' else 'a number'}, got {_type_name(value)}",
                             where)
        if spec.min is not None and value < spec.min or spec.max is not None and value > spec.max:
            raise BadRequest(f"must be between {_num(spec.min)} and {_num(spec.max)}, got {value}", where)
        return value
    if kind == "timestamp":
        return _timestamp(value, where)
    if kind == "any":  # the route handler checks the shape
        return value
    raise AssertionError(f"unknown spec type {kind}")


def _timestamp(value: Any, where: str) -> float:
    if isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value):
        return float(value)
    if isinstance(value, str):
        try:
            return datetime.fromisoformat(value.replace("Z", "+00:00")).timestamp()
        except ValueError:
            pass
    raise BadRequest("must be seconds since the epoch or an ISO 8601 date-time", where)


def _check_size(value: Any, spec: Spec, where: str, unit: str) -> None:
    n = len(value)
    if spec.min is not None and n < spec.min:
        raise BadRequest(f"must have at least {_num(spec.min)} {unit}" if spec.min > 1 else "must not be empty", where)
    if spec.max is not None and n > spec.max:
        raise BadRequest(f"must have at most {_num(spec.max)} {unit}, got {n}", where)


def _join(path: str, name: str) -> str:
    return f"{path}.{name}" if path else name


def _num(x: float | None) -> str:
    return "any" if x is None else str(int(x)) if float(x).is_integer() else str(x)


def _type_name(value: Any) -> str:
    return {dict: "an object", list: "an array", str: "a string", bool: "a boolean", int: "an integer",
            float: "a number", type(None): "null"}.get(type(value), type(value).__name__)
