"""A spec key declared once: a dataclass field whose metadata carries its JSON Schema, its
default and its description (``key(...)``). The JSON Schema's properties, the defaults, the
keys a section accepts and the checks of a value all come from that declaration; a rule
between two fields stays hand-written where the section is parsed.

    @dataclass(frozen=True)
    class Timeouts(Keyed):
        kill: float = key({"$ref": "#/$defs/seconds"}, "SIGTERM to SIGKILL.", 5.0)
"""

from __future__ import annotations

import dataclasses
import re
from typing import Any, Callable, TypeVar

from launcher.checks import (
    check_keys,
    expect_bool,
    expect_dict,
    expect_int,
    expect_number,
    expect_str,
    fail,
)

T = TypeVar("T")
# the kinds of value a key's schema may name by $ref (the JSON Schema's $defs hold them)
REFS = {"#/$defs/seconds": {"type": "number", "minimum": 0}}


def key(schema: dict[str, Any], description: str = "", default: Any = dataclasses.MISSING,
        *, parse: Callable[[Any, str], Any] | None = None, problem: str | None = None,
        required: str | None = None, factory: Callable[[], Any] | None = None,
        hand: bool = False) -> Any:
    """A dataclass field that is one key of the spec. ``schema``: its JSON Schema (the
    value's checks come from it: type, minimum, exclusiveMinimum, pattern);
    ``parse(value, where)`` replaces those checks where a key needs its own; ``problem``:
    the error for a string that misses its pattern; ``required``: the key must be given,
    and this says what it is; ``factory``: a default made anew each time; ``hand``: its
    rules read other keys, so it is parsed by hand where its section is."""
    meta = {"schema": schema, "description": description, "parse": parse,
            "problem": problem, "required": required, "hand": hand,
            "default": None if default is dataclasses.MISSING else default}
    if factory is not None:
        return dataclasses.field(default_factory=factory, metadata=meta)
    return dataclasses.field(default=default, metadata=meta)


def declared(cls: type) -> list[dataclasses.Field]:
    """The fields of ``cls`` that are spec keys, in their order."""
    return [f for f in dataclasses.fields(cls) if "schema" in f.metadata]


def properties(cls: type) -> dict[str, dict[str, Any]]:
    """The JSON Schema of each key: its schema, default (where it has one), description."""
    out = {}
    for f in declared(cls):
        prop = dict(f.metadata["schema"])
        if f.metadata["default"] is not None:
            prop["default"] = f.metadata["default"]
        if f.metadata["description"]:
            prop["description"] = f.metadata["description"]
        out[f.name] = prop
    return out


def defaults(cls: type) -> dict[str, Any]:
    return {f.name: f.metadata["default"] for f in declared(cls)
            if f.metadata["default"] is not None}


def value_of(f: dataclasses.Field, value: Any, where: str) -> Any:
    """One given value, checked as its declaration says."""
    parse = f.metadata["parse"]
    if parse is not None:
        return parse(value, where)
    schema = f.metadata["schema"]
    schema = {**REFS.get(schema.get("$ref", ""), {}), **schema}
    kind = schema.get("type")
    if kind == "number":
        number = expect_number(value, where, minimum=float(schema.get("minimum", 0)))
        low = schema.get("exclusiveMinimum")
        if low is not None and number <= low:
            raise fail(where, f"must be greater than {low:g}")
        return number
    if kind == "integer":
        return expect_int(value, where, minimum=schema.get("minimum", 1))
    if kind == "boolean":
        return expect_bool(value, where)
    if kind == "string":
        text = expect_str(value, where)
        if "pattern" in schema and not re.match(schema["pattern"], text):
            raise fail(where, f"{f.metadata['problem'] or 'is not allowed'}, got {text!r}")
        return text
    raise AssertionError(f"{where}: declared without a check ({schema})")


def parse_section(cls: type[T], raw: Any, where: str, **fixed: Any) -> T:
    """A ``cls`` from a spec section: unknown keys refused, each given value checked as
    declared, the others at their defaults. ``fixed``: fields set by the caller."""
    given = expect_dict(raw, where)
    fields = declared(cls)
    check_keys(given, tuple(f.name for f in fields), where)
    values = {f.name: value_of(f, given[f.name], f"{where}.{f.name}")
              for f in fields if f.name in given}
    return cls(**values, **fixed)


class Keyed:
    """A section of the spec as a frozen dataclass: ``to_dict()``, its given fields (those
    not None) as plain JSON data (plan.json, --dry-run --json)."""

    def to_dict(self) -> dict[str, Any]:
        values = ((f.name, getattr(self, f.name))
                  for f in dataclasses.fields(self))  # type: ignore[arg-type]
        return {name: value for name, value in values if value is not None}
