"""Backend options declared as data: each backend's spec section is a frozen dataclass whose
fields carry their kind and rules (``option(...)``). One parser and one JSON Schema come from
that declaration, so a new engine writes no validation code of its own:

    @dataclass(frozen=True)
    class DockerOptions:
        image: str | None = option(None, "word", doc="the tasks' image")
        network: str = option("host", "choice", choices=("host", "bridge"))
"""

from __future__ import annotations

import dataclasses
import os
from typing import Any, Callable

from launcher.checks import (
    check_keys,
    expect_argv,
    expect_bool,
    expect_dict,
    expect_int,
    expect_number,
    expect_str,
)
from launcher.errors import SpecError

KINDS = ("str", "word", "path", "int", "number", "bool", "choice", "args", "map", "names")


def option(default: Any = None, kind: str = "str", *, doc: str = "",
           minimum: float | None = None, maximum: float | None = None,
           choices: tuple = (), check: Callable[[Any, str], Any] | None = None,
           message: str | None = None) -> Any:
    """A dataclass field that is one option of a backend's section.

    kinds: ``str`` (one line), ``word`` (no spaces, not starting with '-'), ``path`` (one
    line, ``~`` expanded), ``int``, ``number``, ``bool``, ``choice`` (one of ``choices``),
    ``args`` (command-line options, each starting with '-'), ``map`` (names to one-line
    strings), ``names`` (a list of words). ``check(value, where)`` adds a rule of the
    backend's own and returns the value to keep; ``message`` replaces the generic error
    for a value of the wrong kind."""
    assert kind in KINDS, kind
    meta = {"kind": kind, "doc": doc, "minimum": minimum, "maximum": maximum,
            "choices": choices, "check": check, "message": message}
    if isinstance(default, (dict, list)):
        return dataclasses.field(default_factory=lambda: type(default)(default),
                                 metadata=meta)
    return dataclasses.field(default=default, metadata=meta)


def keys(options_type: type) -> tuple[str, ...]:
    return tuple(f.name for f in dataclasses.fields(options_type))


def parse(options_type: type, raw: Any, where: str) -> Any:
    """An ``options_type`` from a spec section; SpecError naming the field otherwise."""
    section = expect_dict(raw if raw is not None else {}, where)
    check_keys(section, keys(options_type), where)
    values = {}
    for f in dataclasses.fields(options_type):
        if f.name in section:
            at = f"{where}.{f.name}"
            value = _value(dict(f.metadata), section[f.name], at)
            check = f.metadata.get("check")
            values[f.name] = check(value, at) if check else value
    return options_type(**values)


def _one_line(value: Any, where: str) -> str:
    text = expect_str(value, where)
    if "\n" in text or "\x00" in text:
        raise SpecError(where, "must be one line")
    return text


def _value(meta: dict, value: Any, where: str) -> Any:
    """``value`` checked and converted as its option's kind says (``_KINDS``)."""
    return _KINDS[meta["kind"]](meta, value, where)


def _word(meta: dict, value: Any, where: str) -> str:
    text = _one_line(value, where)
    if text.startswith("-") or any(c.isspace() for c in text):
        raise SpecError(where, f"{text!r} must be one word that does not start with '-'")
    return text


def _int(meta: dict, value: Any, where: str) -> int:
    low, high = meta["minimum"], meta["maximum"]
    number = expect_int(value, where, minimum=int(low if low is not None else 1))
    if high is not None and number > high:
        raise SpecError(where, f"must be at most {high:g}, got {number}")
    return number


def _choice(meta: dict, value: Any, where: str) -> Any:
    if not any(value is c or (type(value) is type(c) and value == c) for c in meta["choices"]):
        allowed = ", ".join(_shown(c) for c in meta["choices"])
        raise SpecError(where, f"{meta['message'] or f'must be one of {allowed}'}, "
                               f"got {value!r}")
    return value


def _args(meta: dict, value: Any, where: str) -> list[str]:
    args = expect_argv(value, where)
    for i, arg in enumerate(args):
        if not arg.startswith("-"):
            raise SpecError(f"{where}[{i}]", f"{arg!r} is not an option: write each as "
                                             "--name=value")
    return args


def _map(meta: dict, value: Any, where: str) -> dict[str, Any]:
    given = expect_dict(value, where)
    return {k: _one_line(v, f"{where}.{k}") if not isinstance(v, (bool, int)) else v
            for k, v in given.items()}


def _names(meta: dict, value: Any, where: str) -> list[str]:
    if not isinstance(value, list):
        raise SpecError(where, "must be a list of names")
    return [_word(meta, v, f"{where}[{i}]") for i, v in enumerate(value)]


# How each kind of option is checked: the value as given, where it is (for the error).
_KINDS: dict[str, Callable[[dict, Any, str], Any]] = {
    "str": lambda meta, value, where: _one_line(value, where),
    "path": lambda meta, value, where: os.path.expanduser(_one_line(value, where)),
    "word": _word,
    "int": _int,
    "number": lambda meta, value, where: expect_number(
        value, where, minimum=meta["minimum"] if meta["minimum"] is not None else 0.0),
    "bool": lambda meta, value, where: expect_bool(value, where),
    "choice": _choice,
    "args": _args,
    "map": _map,
    "names": _names,
}


def _shown(value: Any) -> str:
    if value is True or value is False:
        return str(value).lower()
    return value if isinstance(value, str) else repr(value)


def schema(options_type: type, description: str) -> dict[str, Any]:
    """The JSON Schema of a backend's section, derived from its declaration."""
    props: dict[str, Any] = {}
    for f in dataclasses.fields(options_type):
        m = f.metadata
        kind = m["kind"]
        s: dict[str, Any]
        if kind in ("str", "word", "path"):
            s = {"type": "string"}
        elif kind == "int":
            s = {"type": "integer", "minimum": int(m["minimum"] if m["minimum"] is not None
                                                   else 1)}
            if m["maximum"] is not None:
                s["maximum"] = m["maximum"]
        elif kind == "number":
            s = {"type": "number", "minimum": m["minimum"] if m["minimum"] is not None else 0}
        elif kind == "bool":
            s = {"type": "boolean"}
        elif kind == "choice":
            s = {"enum": list(m["choices"])}
        elif kind in ("args", "names"):
            s = {"type": "array", "items": {"type": "string"}}
        else:
            s = {"type": "object"}
        if m["doc"]:
            s["description"] = m["doc"]
        props[f.name] = s
    return {"type": "object", "description": description, "additionalProperties": False,
            "properties": props}
