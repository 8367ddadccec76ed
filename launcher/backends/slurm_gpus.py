"""A Slurm step's GPUs: Slurm binds them itself; the step's first output line says which
(``reporting_step`` wraps the command, ``StepDevices`` reads the line into ``task.gpus``)."""

from __future__ import annotations

import dataclasses
from typing import IO

from launcher.plan import TaskPlan

STEP_LINE = "tfcluster: the Slurm step's CUDA_VISIBLE_DEVICES="
# Prints what Slurm bound, then runs the task's command (its arguments never pass a shell).
STEP_WRAPPER = ["/bin/sh", "-c", f'echo "{STEP_LINE}${{CUDA_VISIBLE_DEVICES-}}"; exec "$@"',
                "tfcluster-step"]


def reporting_step(task: TaskPlan) -> TaskPlan:
    """The task as a Slurm step that asks for GPUs runs it: its first output line says
    which devices Slurm bound (``StepDevices`` records them); others as they are."""
    if not task.resources.gpus:
        return task
    return dataclasses.replace(task, command=[*STEP_WRAPPER, *task.command])


class StepDevices:
    """A Slurm step's output, read through: the wrapper's line sets ``task.gpus`` (the
    plan's task: the summary and ``launch status`` show it)."""

    def __init__(self, stream: IO[bytes], task: TaskPlan):
        self.stream = stream
        self.task = task
        self.head: bytes | None = b""     # the output until its first line ended
        self._read_now = getattr(stream, "read1", stream.readline)

    def _saw(self, data: bytes) -> bytes:
        if self.head is not None:
            self.head += data
            if b"\n" in self.head or not data:
                first = self.head.split(b"\n", 1)[0]
                self.head = None
                if first.startswith(STEP_LINE.encode()):
                    value = first[len(STEP_LINE):].decode(errors="replace").strip()
                    self.task.gpus = [d for d in value.split(",") if d]
        return data

    def readline(self) -> bytes:
        return self._saw(self.stream.readline())

    def read1(self, size: int = -1) -> bytes:
        return self._saw(self._read_now(size))

    def __getattr__(self, name: str):
        return getattr(self.stream, name)
