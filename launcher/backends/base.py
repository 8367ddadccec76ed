"""The one small interface every backend implements.

A backend knows how to reach hosts: pick ports there, check them before anything starts,
start one task, and hand back a handle the job loop can poll, signal and read output from.
The job loop (launcher/job.py) owns the policy: start order, the end, restarts, teardown.
Engines that submit whole jobs (Slurm, Kubernetes) also render what they submit
(``describe``), printed by ``--dry-run``. A backend that gives tasks their GPUs is also a
``PlacesGpus``; what an engine that holds the run does beyond running tasks (its handle,
``--detach``'s submission, following a run by its handle) is in launcher/backends/engine.py.

A backend never sees the spec. It is built from its options; ``accept`` gives it the
job's Reservation (launcher/plan.py: names, tasks and their spec addresses, resources),
``prepare`` acquires it, ``place`` puts each task while the plan is built; from then on
every call takes the plan (``preflight``, ``describe``, ``submit``) or a task of it.
"""

from __future__ import annotations

import os
import re
import signal
import threading
from abc import ABC, abstractmethod
from collections.abc import Hashable
from dataclasses import dataclass
from typing import IO, TYPE_CHECKING, Any, Callable, ClassVar, Protocol

from launcher.plan import NoticeRoute

if TYPE_CHECKING:
    from launcher.checks import Address
    from launcher.gpus import Gpu, Machine
    from launcher.plan import JobPlan, Reservation, TaskPlan


@dataclass
class ProbeResult:
    """The outcome of a short command run where a task would run (checks, storage probe)."""

    returncode: int
    output: str


class TaskOutput(Protocol):
    """A task's merged stdout/stderr as the job loop reads it: lines as bytes; a stream that
    also has ``read1`` is read as its bytes arrive (launcher/output/task_output.py)."""

    def readline(self) -> bytes: ...

    def close(self) -> None: ...


class TaskHandle(ABC):
    """A started task. ``output`` yields its merged stdout/stderr as bytes lines.
    ``start_failure``: once it ended, the one line saying why its command never ran (the
    kernel, the remote shell or the engine refused it), else None."""

    task: TaskPlan
    output: TaskOutput | None
    start_failure: str | None = None

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


class RelayedOutput:
    """A task's output that a thread of the launcher relays from elsewhere (an agent's
    frames: ssh's host session, a Slurm node step): ``output`` is the read end of a pipe of
    its own, read as any process's output is; ``write`` passes bytes on, ``close`` ends it
    (EOF: everything written is read before the job loop sees the task's exit)."""

    def __init__(self) -> None:
        read_end, self._write_end = os.pipe()
        self.output: IO[bytes] = open(read_end, "rb")   # noqa: SIM115 (the job loop closes it)
        self._lock = threading.Lock()

    def write(self, data: bytes) -> None:
        with self._lock:
            if self._write_end < 0:
                return
            view = memoryview(data)
            try:
                while view:
                    view = view[os.write(self._write_end, view):]
            except OSError:         # the reader closed its end: the output is dropped
                pass

    def close(self) -> None:
        with self._lock:
            if self._write_end >= 0:
                os.close(self._write_end)
                self._write_end = -1


class ExecWatch:
    """A task's output, whose first lines are read for the one a wrapper prints when the
    task's own exec failed (setpriv, docker's init, slurmstepd): ``handle.start_failure``
    is then ``refusal(program, reason)``. Everything is passed on as it came; a line that
    comes in pieces (docker's init writes its message in three) is checked once whole."""

    FIRST_LINES = 3
    FIRST_BYTES = 4096

    def __init__(self, stream: TaskOutput, handle: TaskHandle, pattern: re.Pattern[str],
                 refusal: Callable[[str, str], str]):
        self.stream, self.handle, self.pattern, self.refusal = stream, handle, pattern, refusal
        self.head = b""         # what came of the first lines so far
        self.watching = True
        read_now = getattr(stream, "read1", None)
        if read_now is not None:    # read as it comes (launcher/output/task_output.py)
            self._read_now: Callable[[int], bytes] = read_now
            self.read1 = self._read1

    def readline(self) -> bytes:
        return self._watch(self.stream.readline())

    def _read1(self, size: int = -1) -> bytes:
        """What the stream has now (a bar redrawn without newlines comes as it is drawn)."""
        return self._watch(self._read_now(size))

    def _watch(self, data: bytes) -> bytes:
        if not self.watching or not data:
            return data
        self.head += data
        lines = self.head.split(b"\n")
        for line in lines[:-1][:self.FIRST_LINES]:      # whole lines only
            found = self.pattern.search(line.decode(errors="replace").rstrip("\r"))
            if found:
                self.handle.start_failure = self.refusal(found["program"], found["reason"])
                break
        self.watching = not self.handle.start_failure and \
            len(lines) <= self.FIRST_LINES and len(self.head) < self.FIRST_BYTES
        return data

    def fileno(self) -> int:
        """The stream's descriptor: the output reader (launcher/output/reader.py) selects it."""
        return getattr(self.stream, "fileno")()     # noqa: B009 - not every TaskOutput has one

    def close(self) -> None:
        self.stream.close()


class NotStarted(TaskHandle):
    """A task whose command was refused at its start: ended at once with the shell's status
    for it (127 not found, 126 not runnable); ``start_failure`` says why."""

    output = None

    def __init__(self, task: TaskPlan, line: str, status: int):
        self.task = task
        self.start_failure = line
        self.status = status

    def poll(self) -> int | None:
        return self.status

    def signal(self, sig: int) -> None:
        pass


class Backend(ABC):
    """Start, poll, signal, stop tasks on one kind of infrastructure."""

    name: ClassVar[str]
    # The spec section named like the backend: a dataclass of options declared with
    # launcher.spec.declared.key (None: the backend takes no options).
    OPTIONS: ClassVar[type | None] = None
    # Threads that start tasks off the job loop's thread (launcher/tasks.py); 0: one after
    # another on the loop's thread (``start`` need not be thread-safe).
    start_threads: ClassVar[int] = 0
    # Every task is a process of this machine (it sees the launcher's filesystem).
    local_processes: ClassVar[bool] = False
    # The launcher can reach the tasks' addresses (their TF servers' gRPC): readiness and
    # liveness probes (launcher/monitors/liveness.py) work. Not from outside a Kubernetes cluster.
    reachable: ClassVar[bool] = True
    # An address without a port gets one picked anew at every start (--dry-run says so).
    ports_picked_at_start: ClassVar[bool] = True
    # ``start`` also serves a process beside the tasks on a task's host (TensorBoard on the
    # chief's: launcher/tensorboard.py); False: such a process runs on this machine.
    serves_beside_tasks: ClassVar[bool] = False
    # what the preflight found that the user should read (a workdir's copy, the TensorFlow
    # of each host), printed once it passed; a backend's preflight sets its own list
    preflight_notes: list[str] = []
    # How a preemption notice reaches the tasks (launcher/plan.py ``NoticeRoute``): the launcher
    # signals the chief with SIGURG, and the notice's sitecustomize is where the launcher
    # has it. An image's tasks find it in the image; Kubernetes' pods only hear SIGTERM.
    notice: ClassVar[NoticeRoute] = NoticeRoute()

    def __init__(self, options: Any = None, *, remap: bool = False, inside_job: bool = False):
        """``options``: the spec's section named like the backend, as its ``OPTIONS``.
        ``remap``: ``--local`` runs a spec written for another backend here, every host
        mapped to this machine on purpose. ``inside_job``: the launcher runs inside the
        engine's job (a detached Slurm run's batch script): ``prepare`` adopts that job,
        ``close`` leaves it to end with the script."""
        self.options = options
        self.remap = remap
        self.inside_job = inside_job

    @classmethod
    def validate_options(cls, raw: dict[str, Any] | None, field: str) -> Any:
        """This backend's section of the spec (``ssh``, ``slurm``...) as its ``OPTIONS``;
        SpecError naming the field when it is wrong."""
        if cls.OPTIONS is not None:
            from launcher.spec.declared import parse_section

            return parse_section(cls.OPTIONS, {} if raw is None else raw, field)
        if raw:
            from launcher.errors import SpecError

            raise SpecError(f"{field}.{next(iter(raw))}",
                            f"unknown key: backend {cls.name!r} takes no options")
        return {}

    def accept(self, reservation: Reservation) -> None:
        """What the job asks of this backend, before its plan exists (``--dry-run`` too):
        SpecError when the backend cannot run it; else the backend keeps what placement and
        the engine's own objects need (Slurm's allocation, Kubernetes' pod names)."""

    def place(self, role: str, index: int, address: Address) -> Address:
        """Where task ``role:index``, given ``address`` by the spec, runs: the address the
        other tasks use to reach it (the local backend maps every host to localhost; a
        Kubernetes task is its pod). A port of None is picked by ``allocate_port``."""
        return address

    @abstractmethod
    def allocate_port(self, host: str) -> int:
        """A free port on ``host``, not handed out before in this job."""

    def preflight(self, plan: JobPlan) -> None:
        """Check every host before anything starts; raise PreflightError naming each one
        that failed. Nothing may be left running. The run's plan: a backend keeps what
        ``start`` needs of it (its timeouts)."""

    def probe(self, task: TaskPlan, argv: list[str], timeout: float) -> ProbeResult:
        """Run a short command where ``task`` would run, with its environment."""
        raise NotImplementedError(f"backend {self.name} cannot run probes")

    def storage_view(self, task: TaskPlan) -> Hashable:
        """Where ``task`` sees filesystems from: tasks with the same view (and the same
        interpreter, working directory and environment) share one storage probe
        (launcher/backends/storage_check.py). By default its host."""
        return task.host

    @abstractmethod
    def start(self, task: TaskPlan) -> TaskHandle:
        """Start one task; its process runs in a process group of its own."""

    def prepare(self) -> None:
        """Acquire what ``accept`` was asked for, before the plan is built (a Slurm
        allocation: its nodes are the tasks' hosts). Not called for ``--dry-run``;
        ``close`` releases it."""

    def describe(self, plan: JobPlan) -> str | None:
        """What ``--dry-run`` prints besides the task list (a batch script, YAML)."""
        return None

    def tunnel_command(self, host: str, port: int) -> str | None:
        """The command that makes ``host:port`` reachable from this machine (an ssh
        tunnel), where a task's host is not; None: the backend knows none."""
        return None

    def close(self) -> None:
        """Release whatever the backend holds (connections, allocations)."""


class PlacesGpus(ABC):
    """A backend that gives each task its GPUs (CUDA_VISIBLE_DEVICES, launcher/gpus.py):
    those that start processes themselves (local, ssh, docker). Slurm and Kubernetes bind
    devices."""

    _gpus_here: tuple[Gpu, ...] | None      # this machine's, once asked (None: no nvidia-smi)

    def gpu_machines(self, plan: JobPlan) -> list[Machine] | None:
        """Each machine the plan's tasks run on, with its GPUs; None while they are not
        known (ssh before its preflight). By default every task runs on this machine, whose
        nvidia-smi is asked."""
        from launcher.gpus import discover_here, machines_here, path_of

        if not hasattr(self, "_gpus_here"):      # nvidia-smi once per run: it can be slow
            self._gpus_here = discover_here(path_of(plan))
        return machines_here(plan, self._gpus_here)


def gpu_machines(backend: Backend, plan: JobPlan) -> list[Machine] | None:
    """The machines and their GPUs where ``backend`` places GPUs; None where it does not."""
    return backend.gpu_machines(plan) if isinstance(backend, PlacesGpus) else None
