"""Secrets in the environment are never printed."""

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
