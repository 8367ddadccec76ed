"""A docker task's GPUs: its ``docker run --gpus`` options, and the engine's NVIDIA runtime
checked before any container starts (docs/gpus.md)."""

from __future__ import annotations

import json
from collections.abc import Sequence

from launcher.gpus import VISIBLE, listed
from launcher.plan import TaskPlan


def docker_args(task: TaskPlan) -> tuple[list[str], dict[str, str]]:
    """``docker run`` options for a task's GPUs, and the environment values that differ
    inside its container: ``--gpus '"device=2,3"'`` exposes those devices, numbered 0, 1
    inside; a task without GPUs gets none, even where the engine's default runtime is
    NVIDIA's (NVIDIA_VISIBLE_DEVICES=void)."""
    if task.gpus is None:
        return [], {}
    if not task.gpus:
        return [], {"NVIDIA_VISIBLE_DEVICES": "void"}
    inside = ",".join(str(i) for i in range(len(task.gpus)))
    return ["--gpus", f'"device={",".join(task.gpus)}"'], {VISIBLE: inside}


def docker_runtime_problem(runtimes_json: str, tasks: Sequence[TaskPlan]) -> str | None:
    """Why the engine cannot give the tasks their GPUs (``docker info --format
    '{{json .Runtimes}}'`` names no NVIDIA runtime), or None."""
    wanting = [t.name for t in tasks if t.gpus]
    if not wanting:
        return None
    try:
        runtimes = sorted(json.loads(runtimes_json or "{}"))
    except (ValueError, TypeError):
        runtimes = []
    if any("nvidia" in r for r in runtimes):
        return None
    return (f"docker: {listed(wanting)} get GPUs, but the engine has no NVIDIA runtime "
            f"(runtimes: {', '.join(runtimes) or 'none listed'}): install the NVIDIA "
            "Container Toolkit and run 'nvidia-ctk runtime configure --runtime=docker', or "
            "give those roles resources.ROLE.gpus: 0 (docs/gpus.md)")
