"""Plain value checks for the spec and the backends' sections: each raises a SpecError that
names the field (``cluster.worker[1]``) and what is wrong with it; ``Address``, a task's
address as a spec gives it."""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from launcher.errors import SpecError

_HOST_RE = re.compile(r"^[A-Za-z0-9_]([A-Za-z0-9_.-]*[A-Za-z0-9_])?$")


@dataclass(frozen=True)
class Address:
    """One task's address as the spec gives it; port None means "pick a free one"."""

    host: str
    port: int | None = None

    def __str__(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"{host}:{self.port}" if self.port is not None else host


def fail(field_name: str, message: str) -> SpecError:
    return SpecError(field_name, message)


def type_name(value: Any) -> str:
    return {
        bool: "a boolean", int: "an integer", float: "a number", str: "a string",
        list: "a list", dict: "an object", type(None): "null",
    }.get(type(value), type(value).__name__)


def check_keys(obj: dict, allowed: tuple[str, ...] | list[str], where: str) -> None:
    """Unknown keys are errors; name the first one and the keys that are allowed."""
    for key in obj:
        if key not in allowed:
            prefix = f"{where}." if where else ""
            raise fail(
                f"{prefix}{key}", f"unknown key (allowed: {', '.join(sorted(allowed))})"
            )


def expect_dict(value: Any, where: str) -> dict:
    if not isinstance(value, dict):
        raise fail(where, f"must be an object, got {type_name(value)}")
    return value


def expect_str(value: Any, where: str, allow_empty: bool = False) -> str:
    if not isinstance(value, str):
        raise fail(where, f"must be a string, got {type_name(value)}")
    if not allow_empty and not value.strip():
        raise fail(where, "must not be empty")
    return value


def expect_int(value: Any, where: str, minimum: int = 1) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise fail(where, f"must be an integer, got {type_name(value)}")
    if value < minimum:
        raise fail(where, f"must be at least {minimum}, got {value}")
    return value


def expect_number(value: Any, where: str, minimum: float = 0.0) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise fail(where, f"must be a number, got {type_name(value)}")
    if value < minimum or value != value:
        raise fail(where, f"must be at least {minimum}, got {value}")
    return float(value)


def expect_bool(value: Any, where: str) -> bool:
    if not isinstance(value, bool):
        raise fail(where, f"must be true or false, got {type_name(value)}")
    return value


def expect_argv(value: Any, where: str) -> list[str]:
    if not isinstance(value, list) or not value:
        raise fail(where, "must be a non-empty list of strings (the program and its arguments)")
    for i, arg in enumerate(value):
        if not isinstance(arg, str):
            raise fail(f"{where}[{i}]", f"must be a string, got {type_name(arg)}")
        if "\x00" in arg:
            raise fail(f"{where}[{i}]", "must not contain a NUL character")
    if not value[0].strip():
        raise fail(f"{where}[0]", "the program name must not be empty")
    return list(value)


def parse_address(value: Any, where: str) -> Address:
    """'host', 'host:port' or '[v6]:port'."""
    text = expect_str(value, where)
    if text != text.strip():
        raise fail(where, f"address {text!r} has leading or trailing spaces")
    host, port_text = text, None
    if text.startswith("["):
        end = text.find("]")
        if end < 0:
            raise fail(where, f"address {text!r} has '[' without ']'")
        host, rest = text[1:end], text[end + 1:]
        if rest:
            if not rest.startswith(":"):
                raise fail(where, f"address {text!r}: expected ':PORT' after ']'")
            port_text = rest[1:]
    elif text.count(":") == 1:
        host, port_text = text.split(":")
    elif text.count(":") > 1:
        raise fail(where, f"address {text!r}: write IPv6 addresses as [ADDR]:PORT")
    if not host or (":" not in host and not _HOST_RE.match(host)):
        raise fail(where, f"address {text!r} has an invalid host name")
    port = None
    if port_text is not None:
        if not port_text.isdigit():
            raise fail(where, f"address {text!r}: port {port_text!r} is not a number")
        port = int(port_text)
        if not 1 <= port <= 65535:
            raise fail(where, f"address {text!r}: port {port} is outside 1-65535")
    return Address(host, port)


TRACKING_SCHEMES = ("http", "https")
EXPERIMENT_MAX = 500        # characters of an MLflow experiment name


def tracking_uri_problem(uri: str) -> str | None:
    """What is wrong with an MLflow tracking URI for tfcluster, or None: it talks to a
    tracking server over MLflow's REST API, so the URI is that server's http(s) URL."""
    scheme, sep, rest = uri.partition("://")
    if not sep or scheme.lower() not in TRACKING_SCHEMES:
        shown = scheme if sep else uri.partition(":")[0] or uri
        return (f"scheme {shown!r} is not supported: give the http:// or https:// URL of an "
                "MLflow tracking server (tfcluster logs through its REST API)")
    host = rest.split("/", 1)[0].rpartition("@")[2]
    if not host or host.startswith(":"):
        return "names no host: give http(s)://HOST[:PORT] of an MLflow tracking server"
    return None


def experiment_problem(name: str) -> str | None:
    """What is wrong with an MLflow experiment name, or None."""
    if not name.strip():
        return "is empty: give an experiment name"
    if len(name) > EXPERIMENT_MAX:
        return f"is {len(name)} characters long: at most {EXPERIMENT_MAX}"
    if any(ord(c) < 32 or ord(c) == 127 for c in name):
        return "holds a control character (a line break, a tab): give a plain name"
    return None
