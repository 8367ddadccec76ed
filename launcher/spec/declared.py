"""A spec key declared once: a dataclass field whose metadata carries its JSON Schema, its
default and its description (``key(...)``). The JSON Schema's properties, the defaults, the
keys a section accepts and the checks of a value all come from that declaration; a rule
between two fields stays hand-written where the section is parsed. The spec's sections and
each backend's options (``ssh``, ``slurm``...) are declared and parsed the same way:

    @dataclass(frozen=True)
    class Timeouts(Keyed):
        kill: float = key({"$ref": "#/$defs/seconds"}, "SIGTERM to SIGKILL.", 5.0)

    @dataclass(frozen=True)
    class DockerOptions:
        network: str = key({"type": "string"}, "the tasks' network", "host", parse=word,
                           check=_network)
"""

from __future__ import annotations

import dataclasses
import os
import re
from collections.abc import Mapping
from typing import Any, Callable, TypeVar

from launcher.checks import (
    check_keys,
    expect_argv,
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
# the schemas of a string and of a list of strings, the kinds most keys of a backend take
STRING: dict[str, Any] = {"type": "string"}
STRINGS: dict[str, Any] = {"type": "array", "items": {"type": "string"}}


def key(schema: dict[str, Any], description: str = "", default: Any = dataclasses.MISSING,
        *, parse: Callable[[Any, str], Any] | None = None, problem: str | None = None,
        required: str | None = None, factory: Callable[[], Any] | None = None,
        hand: bool = False, check: Callable[[Any, str], Any] | None = None,
        nullable: bool = False) -> Any:
    """A dataclass field that is one key of the spec or of a backend's options.
    ``schema``: its JSON Schema (the value's checks come from it: type, minimum, maximum,
    exclusiveMinimum, pattern, enum); ``parse(value, where)`` replaces those checks where a
    key needs its own (``word``, ``user_path``, ``flags``...: the kinds of string below);
    ``check(value, where)``: a rule of the key's own, after those checks, returning the
    value to keep; ``problem``: the error for a value that misses its pattern or enum;
    ``required``: the key must be given, and this says what it is; ``factory``: a default
    made anew each time; ``hand``: its rules read other keys, so it is parsed by hand where
    its section is; ``nullable``: a null given is the default."""
    meta = {"schema": schema, "description": description, "parse": parse,
            "problem": problem, "required": required, "hand": hand, "check": check,
            "nullable": nullable,
            "default": None if default is dataclasses.MISSING else default}
    if factory is not None:
        return dataclasses.field(default_factory=factory, metadata=meta)
    return dataclasses.field(default=default, metadata=meta)


def declared(cls: type) -> list[dataclasses.Field]:
    """The fields of ``cls`` that are spec keys, in their order."""
    return [f for f in dataclasses.fields(cls) if "schema" in f.metadata]


def properties(cls: type, with_defaults: bool = True) -> dict[str, dict[str, Any]]:
    """The JSON Schema of each key: its schema, default (where it has one, unless
    ``with_defaults`` is False), description."""
    out = {}
    for f in declared(cls):
        prop = dict(f.metadata["schema"])
        if with_defaults and f.metadata["default"] is not None:
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
    meta = f.metadata
    if value is None and meta["nullable"]:
        return meta["default"]
    parse = meta["parse"]
    value = parse(value, where) if parse else _checked(meta, value, where)
    return meta["check"](value, where) if meta["check"] else value


def _checked(meta: Mapping[str, Any], value: Any, where: str) -> Any:
    """``value`` checked as the key's JSON Schema says (``REFS`` resolved)."""
    schema = meta["schema"]
    schema = {**REFS.get(schema.get("$ref", ""), {}), **schema}
    if "enum" in schema:
        return _one_of(schema["enum"], meta["problem"], value, where)
    kind = schema.get("type")
    if kind == "number":
        # an unnamed or zero minimum reads 0.0 in the error, as the spec's seconds always did
        number = expect_number(value, where, minimum=schema.get("minimum", 0) or 0.0)
        low = schema.get("exclusiveMinimum")
        if low is not None and number <= low:
            raise fail(where, f"must be greater than {low:g}")
        return number
    if kind == "integer":
        number = expect_int(value, where, minimum=schema.get("minimum", 1))
        high = schema.get("maximum")
        if high is not None and number > high:
            raise fail(where, f"must be at most {high:g}, got {number}")
        return number
    if kind == "boolean":
        return expect_bool(value, where)
    if kind == "string":
        text = expect_str(value, where)
        if "pattern" in schema and not re.match(schema["pattern"], text):
            raise fail(where, f"{meta['problem'] or 'is not allowed'}, got {text!r}")
        return text
    raise AssertionError(f"{where}: declared without a check ({schema})")


def _one_of(choices: list[Any], problem: str | None, value: Any, where: str) -> Any:
    if not any(value is c or (type(value) is type(c) and value == c) for c in choices):
        allowed = ", ".join(_shown(c) for c in choices)
        raise fail(where, f"{problem or f'must be one of {allowed}'}, got {value!r}")
    return value


def _shown(value: Any) -> str:
    if value is True or value is False:
        return str(value).lower()
    return value if isinstance(value, str) else repr(value)


# The kinds of string a key may name as its ``parse`` (a backend's options mostly): each
# takes the value as given and where it is (for the error).
def line(value: Any, where: str) -> str:
    """One line of text."""
    text = expect_str(value, where)
    if "\n" in text or "\x00" in text:
        raise fail(where, "must be one line")
    return text


def word(value: Any, where: str) -> str:
    """One word that does not start with '-' (a program, a partition, an image)."""
    text = line(value, where)
    if text.startswith("-") or any(c.isspace() for c in text):
        raise fail(where, f"{text!r} must be one word that does not start with '-'")
    return text


def user_path(value: Any, where: str) -> str:
    """A path on this machine, ``~`` expanded."""
    return os.path.expanduser(line(value, where))


def flags(value: Any, where: str) -> list[str]:
    """Command-line options of a program, each written --name=value."""
    args = expect_argv(value, where)
    for i, arg in enumerate(args):
        if not arg.startswith("-"):
            raise fail(f"{where}[{i}]", f"{arg!r} is not an option: write each as "
                                        "--name=value")
    return args


def words(value: Any, where: str) -> list[str]:
    """A list of words."""
    if not isinstance(value, list):
        raise fail(where, "must be a list of names")
    return [word(v, f"{where}[{i}]") for i, v in enumerate(value)]


def lines(value: Any, where: str) -> dict[str, Any]:
    """Names to one line of text each (or to a boolean or an integer)."""
    given = expect_dict(value, where)
    return {k: line(v, f"{where}.{k}") if not isinstance(v, (bool, int)) else v
            for k, v in given.items()}


def parse_section(cls: type[T], raw: Any, where: str, **fixed: Any) -> T:
    """A ``cls`` from a spec section: unknown keys refused, each given value checked as
    declared, the others at their defaults. ``fixed``: fields set by the caller."""
    given = expect_dict(raw, where)
    fields = declared(cls)
    check_keys(given, tuple(f.name for f in fields), where)
    values = {f.name: value_of(f, given[f.name], f"{where}.{f.name}")
              for f in fields if f.name in given}
    return cls(**values, **fixed)


def section_schema(cls: type, description: str) -> dict[str, Any]:
    """The JSON Schema of a backend's section (its options, listed without defaults)."""
    return {"type": "object", "description": description, "additionalProperties": False,
            "properties": properties(cls, with_defaults=False)}


class Keyed:
    """A section of the spec as a frozen dataclass: ``to_dict()``, its given fields (those
    not None) as plain JSON data (plan.json, --dry-run --json)."""

    def to_dict(self) -> dict[str, Any]:
        values = ((f.name, getattr(self, f.name))
                  for f in dataclasses.fields(self))  # type: ignore[arg-type]
        return {name: value for name, value in values if value is not None}
