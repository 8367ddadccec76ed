"""``$(VAR)`` in a task's arguments, expanded from the task's environment as Kubernetes
expands container args: ``$$`` is a literal ``$`` (so ``$$(VAR)`` stays ``$(VAR)``), and a
variable the environment does not have is left as written."""

from __future__ import annotations

import re

_REF = re.compile(r"\$(\$|\(([^)]*)\))")


def expand(text: str, env: dict[str, str]) -> str:
    """``text`` with every ``$(NAME)`` that ``env`` has replaced by its value."""

    def sub(m: re.Match) -> str:
        if m.group(1) == "$":
            return "$"
        name = m.group(2)
        return env[name] if name in env else m.group(0)

    return _REF.sub(sub, text)


def expand_args(argv: list[str], env: dict[str, str]) -> list[str]:
    return [expand(arg, env) for arg in argv]
