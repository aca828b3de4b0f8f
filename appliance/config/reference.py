"""The settings' reference (docs/settings.md), written from their declarations: every setting with its default, the
values it accepts and why. `python -m appliance.config.reference > docs/settings.md` writes it again; a test checks
that the file matches the declarations."""
from __future__ import annotations

import dataclasses
import inspect
import typing
from pathlib import Path
from typing import Any

from .rules import Rule, rule_of
from .sections import Settings

HEADER = """# Settings

Written from the declarations in `appliance/config/` by `python -m appliance.config.reference > docs/settings.md`;
edit those, not this file. A setting `port` of `[server]` is `APPLIANCE_SERVER_PORT` in the environment; a
top-level one (`data_dir`) is `APPLIANCE_DATA_DIR`. A value outside what a setting accepts stops the boot, named.
"""


def reference() -> str:
    """docs/settings.md: one table per section (the engine sections share one), a row per setting."""
    settings = Settings()
    sections: dict[type, list[tuple[str, Any]]] = {type(settings): [("", settings)]}
    for f in dataclasses.fields(settings):
        value = getattr(settings, f.name)
        if dataclasses.is_dataclass(value):
            sections.setdefault(type(value), []).append((f.name, value))
    parts = [HEADER]
    for cls, instances in sections.items():
        title = ", ".join(f"`[{name}]`" if name else "top level" for name, _ in instances)
        rows = ["| setting | default | accepts | why |", "|---|---|---|---|"]
        hints = typing.get_type_hints(cls)
        for f in dataclasses.fields(cls):
            rule = rule_of(f)
            if rule is None:
                continue
            defaults = [(name, getattr(instance, f.name)) for name, instance in instances]
            rows.append(f"| `{f.name}` | {_defaults(defaults)} | {_accepts(rule, hints[f.name])} | {_text(rule.why)} |")
        doc = inspect.cleandoc(cls.__doc__ or "")
        about = "" if doc.startswith(cls.__name__ + "(") else _text(doc) + "\n\n"  # not the one dataclass writes
        parts.append(f"## {title}\n\n{about}" + "\n".join(rows) + "\n")
    return "\n".join(parts)


def _text(text: str) -> str:
    """Prose as one line of a Markdown table: no line breaks, no cell breaks, no <tag> for HTML to swallow."""
    return text.replace("\n", " ").replace("|", "\\|").replace("<", "&lt;")


def _defaults(defaults: list[tuple[str, Any]]) -> str:
    if len({repr(value) for _, value in defaults}) == 1:
        return _value(defaults[0][1])
    return ", ".join(f"{name}: {_value(value)}" for name, value in defaults)


def _value(value: Any) -> str:
    if isinstance(value, bool):
        return f"`{str(value).lower()}`"
    if isinstance(value, (str, Path)):
        return f'`"{value}"`'
    if isinstance(value, tuple):
        return "`[" + ", ".join(f'"{item}"' for item in value) + "]`"
    if isinstance(value, int):
        return f"`{value:,}`" if value >= 10_000 else f"`{value}`"
    return f"`{value:g}`"


def _accepts(rule: Rule, kind: Any) -> str:
    if rule.choices is not None:
        return "one of " + ", ".join(_value(choice) for choice in rule.choices)
    if rule.form is not None:
        return ("a list, each " if typing.get_origin(kind) is tuple else "") + rule.form.description
    if rule.bounded:
        return rule.bounds()
    if rule.unbounded:
        return "any number"
    return {bool: "true or false", str: "text", Path: "a path"}.get(kind, str(kind))


if __name__ == "__main__":
    print(reference(), end="")
