"""How a setting is declared: its default, what values it takes and why, in one place (`setting`).

    port: int = setting(8080, above=0, maximum=65535, why="where the server listens")

`setting` returns the dataclass field, its `Rule` in the field's metadata; `load.py` checks every value against its
field's rule, so a setting cannot be added without saying what it accepts (tests/unit/test_config.py checks that
each number has bounds or says `unbounded=True`). Checks that relate several settings stay in `load.py`.
"""
from __future__ import annotations

import dataclasses
import ipaddress
import re
from dataclasses import dataclass
from typing import Any, Callable, Mapping, TypeVar

T = TypeVar("T")
RULE = "rule"  # the key of a field's metadata that holds its Rule


@dataclass(frozen=True, slots=True)
class Form:
    """A shape a text setting (or each item of a list setting) must have, and how the error names it."""
    description: str  # completes "'x' is not ..."
    test: Callable[[str], object]


def _is_host(text: str) -> bool:
    if _HOST_NAME.fullmatch(text):
        return True
    try:
        return isinstance(ipaddress.ip_address(text), ipaddress.IPv6Address)
    except ValueError:
        return False


_HOST_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9\-]*(\.[A-Za-z0-9\-]+)*\.?")  # a DNS name or IPv4 address
HOST = Form("a host name or IP address (no scheme or port)", _is_host)
CORE_LIST = Form("a core list such as 0, 0-3 or 0,2", re.compile(r"\d+(-\d+)?(,\d+(-\d+)?)*").fullmatch)


@dataclass(frozen=True, slots=True)
class Rule:
    """What one setting accepts. `minimum`/`maximum` are inclusive, `above`/`below` exclusive; `notes` says what a
    bound means where that helps (0: "off"); `unbounded` says a number has no bounds on purpose."""
    why: str
    choices: tuple[Any, ...] | None = None
    minimum: float | None = None
    maximum: float | None = None
    above: float | None = None
    below: float | None = None
    notes: tuple[tuple[float, str], ...] = ()
    form: Form | None = None
    unbounded: bool = False

    def __post_init__(self) -> None:
        if ((self.above is not None and self.minimum is not None)
                or (self.below is not None and self.maximum is not None)):
            raise ValueError("a bound is inclusive (minimum, maximum) or exclusive (above, below), not both")
        if self.unbounded and (self.bounded or self.choices is not None):
            raise ValueError("unbounded=True is for a number that takes any value: no bounds or choices with it")

    @property
    def bounded(self) -> bool:
        return any(b is not None for b in (self.minimum, self.maximum, self.above, self.below))

    def problems(self, value: Any) -> list[str]:
        """What is wrong with `value` (each without the setting's name), or nothing."""
        if self.choices is not None and value not in self.choices:
            return [f"{value!r} is not one of {sorted(self.choices)}"]
        if self.form is not None:
            items = value if isinstance(value, tuple) else (value,)
            return [f"{item!r} is not {self.form.description}" for item in items if not self.form.test(item)]
        if self.bounded and not self._within(value):
            return [f"must be {self.bounds()}, got {value}"]
        return []

    def _within(self, value: float) -> bool:
        return ((self.minimum is None or value >= self.minimum) and (self.maximum is None or value <= self.maximum)
                and (self.above is None or value > self.above) and (self.below is None or value < self.below))

    def bounds(self) -> str:
        """The accepted range in words: "greater than 0", "0 (off) or more", "from 0 to 1", ..."""
        if self.minimum is not None and self.maximum is not None:
            return f"from {self._number(self.minimum)} to {self._number(self.maximum)}"
        if self.minimum is not None and self.below is None:
            return f"{self._number(self.minimum)} or more"
        low = (f"greater than {self._number(self.above)}" if self.above is not None
               else f"at least {self._number(self.minimum)}" if self.minimum is not None else "")
        high = (f"below {self._number(self.below)}" if self.below is not None
                else f"at most {self._number(self.maximum)}" if self.maximum is not None else "")
        return " and ".join(part for part in (low, high) if part)

    def _number(self, bound: float) -> str:
        text = f"{bound:g}" if isinstance(bound, float) else str(bound)
        note = dict(self.notes).get(bound)
        return f"{text} ({note})" if note else text


def setting(default: T, *, why: str, choices: tuple[Any, ...] | None = None, minimum: float | None = None,
            maximum: float | None = None, above: float | None = None, below: float | None = None,
            notes: Mapping[float, str] | None = None, form: Form | None = None, unbounded: bool = False) -> T:
    """A setting's dataclass field: its default, and the rule its value is checked against at load."""
    rule = Rule(why, None if choices is None else tuple(choices), minimum, maximum, above, below,
                tuple((notes or {}).items()), form, unbounded)
    return dataclasses.field(default=default, metadata={RULE: rule})  # type: ignore[return-value]


def rule_of(field: dataclasses.Field) -> Rule | None:
    """The rule `setting` declared for a field (None for a section, or a field not declared with `setting`)."""
    return field.metadata.get(RULE)


def problems(section: Any, name: str) -> list[str]:
    """What is wrong with one setting of a section, by its declaration."""
    rule = next(rule_of(f) for f in dataclasses.fields(section) if f.name == name)
    return rule.problems(getattr(section, name)) if rule else []
