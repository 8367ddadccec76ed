"""Secrets are never printed: the values of secret-looking variables, options and URL
passwords masked."""

from __future__ import annotations

import re

_SECRET = re.compile(r"(SECRET|TOKEN|PASSWORD|PASSWD|CREDENTIAL|PRIVATE|API_?KEY|ACCESS_KEY)",
                     re.IGNORECASE)
MASK = "***"


def is_secret(name: str) -> bool:
    return bool(_SECRET.search(name))


def redact_env(env: dict[str, str]) -> dict[str, str]:
    """A copy of ``env`` with the values of secret-looking variables masked."""
    return {k: (MASK if is_secret(k) and v else v) for k, v in env.items()}


def masked_argv(argv: list[str]) -> list[str]:
    """``argv`` with the values of secret-looking options masked: ``--token=X``,
    ``--api-key X``."""
    def secret_option(name: str) -> bool:
        return name.startswith("-") and is_secret(name.lstrip("-").replace("-", "_"))

    out: list[str] = []
    for arg in argv:
        if out and "=" not in out[-1] and secret_option(out[-1]):
            out.append(MASK)
            continue
        name, eq, _ = arg.partition("=")
        out.append(f"{name}={MASK}" if eq and secret_option(name) else arg)
    return out


def masked_url(url: str) -> str:
    """A URL with its password masked (``sftp://user:***@host/...``)."""
    scheme, sep, rest = url.partition("://")
    head, at, tail = rest.partition("@")
    if not sep or not at or ":" not in head or "/" in head:
        return url
    return f"{scheme}://{head.split(':', 1)[0]}:{MASK}@{tail}"
