"""The agent: the one program the launcher sends to a host (over ssh) or a Slurm node (as
one job step) to start, watch and end that host's tasks, check the host first and run
short probes there. Standard library only, Python 3.6+: its modules are imported by the
launcher as any module (for their words and checks), and sent as one joined source.

Modules, in the order ``source()`` joins them: ``words`` (why a start failed), ``wire``
(the one frame format), ``tasks`` (the task table), ``probes`` (host, GPUs, environment),
``sync_store`` (the host's half of the workdir's copy), ``entry`` (the entry points).
The launcher's one reader of the frames is ``reader`` (not sent).
"""

from __future__ import annotations

import functools
import json
from pathlib import Path

ORDER = ("words", "wire", "tasks", "probes", "sync_store", "entry")
HERE = Path(__file__).parent


def module_source(name: str) -> str:
    """A module's source without its imports from the agent's own modules (in the joined
    source their names are already defined)."""
    import ast  # off launch's start-up path: only a run that sends the agent joins it

    text = (HERE / f"{name}.py").read_text(encoding="utf-8")
    lines = text.split("\n")
    for node in reversed(ast.parse(text).body):
        if isinstance(node, ast.ImportFrom) and (node.module or "").startswith(__name__):
            del lines[node.lineno - 1:node.end_lineno]
    return "\n".join(lines)


@functools.cache
def source() -> str:
    """The agent's modules joined in ORDER, as one program."""
    return "\n\n".join(f"# ---- launcher/backends/agent/{name}.py\n{module_source(name)}"
                       for name in ORDER)


def first_line() -> bytes:
    """What an agent's stub reads first: the joined source as one JSON string, a line."""
    return (json.dumps(source()) + "\n").encode()
