"""A request body declared once: a frozen dataclass whose fields carry their JSON type and constraints (`wire`).
From it `spec_of` derives the `Spec` that validation and the OpenAPI document read, and `build` makes the typed
object from the value `validate` returned; so adding a field to a body is one line.

A constraint that depends on the settings (a size limit, the engines a request may name) is given as a function of
the settings; an object field, or an array's items, may be another declared class (`of=`).
"""
from __future__ import annotations

import dataclasses
from typing import Any, Callable, TypeVar

from ...config import ServerSettings, Settings
from .validation import Spec

T = TypeVar("T")
_WIRE = "wire"


@dataclasses.dataclass(frozen=True, slots=True)
class Wire:
    """A field's declaration: the arguments of its `Spec`, any of them a function of the settings."""
    type: str
    description: str | Callable[[Settings], str]
    of: type | None  # the declared class of an object field, or of an array's items
    options: dict[str, Any]


@dataclasses.dataclass(frozen=True, slots=True)
class Shape:
    """A declared class's own: its description, whether it takes fields it does not list (ignored), and for a
    request body the most bytes read of it (past that: 413 without reading further)."""
    description: str = ""
    extra: bool = False
    max_bytes: Callable[[ServerSettings], int] | None = None


def wire(type: str, description: str | Callable[[Settings], str] = "", *, of: type | None = None,
         **options: Any) -> Any:
    """A body field of JSON `type`; `options` are `Spec`'s (required, default, min, max, pattern, items, ...)."""
    return dataclasses.field(metadata={_WIRE: Wire(type, description, of, options)})


def shape(description: str = "", *, extra: bool = False,
          max_bytes: Callable[[ServerSettings], int] | None = None) -> Callable[[type[T]], type[T]]:
    """Class decorator (over @dataclass) giving a declared class its `Shape`."""
    def mark(cls: type[T]) -> type[T]:
        setattr(cls, "__shape__", Shape(description, extra, max_bytes))
        return cls
    return mark


def shape_of(cls: type) -> Shape:
    return getattr(cls, "__shape__", Shape())


def spec_of(cls: type, settings: Settings | None = None) -> Spec:
    """The object `Spec` of a declared class, its fields in declaration order."""
    own = shape_of(cls)
    fields = {f.name: _field_spec(f.metadata[_WIRE], settings) for f in dataclasses.fields(cls)}
    return Spec("object", own.description, fields=fields, extra=own.extra)


def _field_spec(wire: Wire, settings: Settings | None) -> Spec:
    options = {name: value(settings) if callable(value) else value for name, value in wire.options.items()}
    description = wire.description(settings) if callable(wire.description) else wire.description
    if wire.of is None:
        return Spec(wire.type, description, **options)
    nested = spec_of(wire.of, settings)
    if wire.type == "object":
        return dataclasses.replace(nested, description=description or nested.description, **options)
    return Spec(wire.type, description, items=nested, **options)


def build(cls: type[T], value: dict[str, Any]) -> T:
    """The typed object of a value `validate` returned for `spec_of(cls)` (every field there, defaults filled in);
    declared classes nested in it are built too (an array of them as a tuple)."""
    args = {}
    for f in dataclasses.fields(cls):  # type: ignore[arg-type]
        wire, item = f.metadata[_WIRE], value[f.name]
        if wire.of is not None and item is not None:
            item = build(wire.of, item) if wire.type == "object" else tuple(build(wire.of, i) for i in item)
        args[f.name] = item
    return cls(**args)
