"""The one small interface every backend implements.

A backend knows how to reach hosts: pick ports there, check them before anything starts,
start one task, and hand back a handle the job loop can poll, signal and read output from.
The job loop (launcher/job.py) owns the policy: start order, the end, restarts, teardown.
Engines that submit whole jobs (Slurm, Kubernetes) also render what they submit
(``describe``), printed by ``--dry-run``.
"""

from __future__ import annotations

import signal
from abc import ABC, abstractmethod
from dataclasses import dataclass
from typing import IO, Any, ClassVar

from launcher.plan import JobPlan, TaskPlan
from launcher.spec import Spec


@dataclass
class ProbeResult:
    """The outcome of a short command run where a task would run (checks, storage probe)."""

    returncode: int
    output: str


class TaskHandle(ABC):
    """A started task. ``output`` yields its merged stdout/stderr as bytes lines."""

    task: TaskPlan
    output: IO[bytes] | None

    @abstractmethod
    def poll(self) -> int | None:
        """Exit status once the task ended (negative: killed by that signal), else None."""

    @abstractmethod
    def signal(self, sig: int) -> None:
        """Send ``sig`` to the task's whole process group, wherever it runs. Never raises
        for a task that already ended."""

    def terminate(self) -> None:
        self.signal(signal.SIGTERM)

    def kill(self) -> None:
        self.signal(signal.SIGKILL)

    @property
    def pid(self) -> int | None:
        """The local process id behind the handle, when there is one."""
        return None


class Backend(ABC):
    """Start, poll, signal, stop tasks on one kind of infrastructure."""

    name: ClassVar[str]
    # Every task is a process of this machine (it sees the launcher's filesystem).
    local_processes: ClassVar[bool] = False
    # The launcher can reach the tasks' addresses (their TF servers' gRPC): readiness and
    # liveness probes (launcher/liveness.py) work. Not from outside a Kubernetes cluster.
    reachable: ClassVar[bool] = True

    def __init__(self, spec: Spec, options: Any = None):
        self.spec = spec
        self.options = options

    @classmethod
    def validate_options(cls, raw: dict[str, Any] | None, field: str) -> Any:
        """Validate this backend's section of the spec (``ssh``, ``slurm``...); raise
        SpecError naming the field. Default: the backend takes no options."""
        return raw or {}

    def host_for(self, host: str) -> str:
        """The address tasks use to reach ``host`` (the local backend maps all to localhost)."""
        return host

    @abstractmethod
    def allocate_port(self, host: str) -> int:
        """A free port on ``host``, not handed out before in this job."""

    def preflight(self, plan: JobPlan) -> None:
        """Check every host before anything starts; raise PreflightError naming each one
        that failed. Nothing may be left running."""

    def probe(self, task: TaskPlan, argv: list[str], timeout: float) -> ProbeResult:
        """Run a short command where ``task`` would run, with its environment."""
        raise NotImplementedError(f"backend {self.name} cannot run probes")

    @abstractmethod
    def start(self, task: TaskPlan) -> TaskHandle:
        """Start one task; its process runs in a process group of its own."""

    def prepare(self) -> None:
        """Acquire what the plan depends on, before it is built (a Slurm allocation: its
        nodes are the tasks' hosts). Not called for ``--dry-run``; ``close`` releases it."""

    def describe(self, plan: JobPlan) -> str | None:
        """What ``--dry-run`` prints besides the task list (a batch script, YAML)."""
        return None

    def close(self) -> None:
        """Release whatever the backend holds (connections, allocations)."""
