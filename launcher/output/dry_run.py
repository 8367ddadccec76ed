"""What ``launch --dry-run`` prints: the plan's plain data (gathered by launcher/api.py)
as text, or as one JSON document with ``--json`` (docs/console.md)."""

from __future__ import annotations

import json
import shlex
from dataclasses import dataclass
from typing import Any

from launcher.gpus import shown
from launcher.output.grouped import GROUP_ABOVE


@dataclass
class DryRun:
    """Everything a dry run shows, as plain data: the plan with secrets masked, the
    backend's name, the lease's line, the GPU lines, whether ports marked 'auto' are
    picked again at start, and the backend's own text (its objects, its script)."""

    doc: dict[str, Any]
    backend: str
    lease: str
    gpu_lines: list[str]
    ports_picked_at_start: bool
    extra: str | None


def dry_run_text(view: DryRun, as_json: bool = False, every: bool = False) -> str:
    """Every task in full up to GROUP_ABOVE tasks (or with ``every``, or as JSON); above,
    the first task of each role in full and every task's address."""
    doc, tasks = view.doc, view.doc["tasks"]
    if as_json:
        doc["backend"] = view.backend
        doc["lease"] = view.lease
        if view.extra is not None:
            doc["rendered"] = view.extra
        return json.dumps(doc, indent=2)
    max_steps = doc["max_steps"] if doc["max_steps"] is not None else "(not set)"
    lines = [f"# job {doc['name']}  run {doc['run_id']}  backend {view.backend}  "
             f"max_steps {max_steps}", f"# model_dir {doc['model_dir']}", f"# {view.lease}"]
    marked = view.ports_picked_at_start and any(t["auto_port"] for t in tasks)
    if marked:
        lines.append("# ports marked 'auto' were picked now and are picked again at start: "
                     "give host:port in the spec to fix them")
    lines += view.gpu_lines
    condensed = not every and len(tasks) > GROUP_ABOVE
    if condensed:
        lines.append(f"# {len(tasks)} tasks: the first of each role in full, then every "
                     "task's address (--dry-run --all: every task in full; --json: all of it)")
    seen: set[str] = set()
    for t in tasks:
        if condensed and t["type"] in seen:
            continue
        seen.add(t["type"])
        lines.append(_head(t, marked))
        lines += [f"  {key}={shlex.quote(value)}" for key, value in t["env"].items()]
        lines.append(f"  command: {shlex.join(t['command'])}")
        if t["cwd"]:
            lines.append(f"  cwd: {t['cwd']}")
    if condensed:
        lines.append("# addresses")
        lines += [_head(t, marked) for t in tasks]
    if view.extra:
        lines += ["", view.extra]
    return "\n".join(lines)


def _head(t: dict[str, Any], marked: bool) -> str:
    auto = "  (auto)" if marked and t["auto_port"] else ""
    gpus = f"  gpus {shown(t['gpus'])}" if t["gpus"] is not None else ""
    return f"{t['type']}:{t['index']}  {t['host']}:{t['port']}{auto}{gpus}"
