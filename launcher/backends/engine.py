"""What a backend does beyond running tasks, one piece per caller (as torchx splits a
scheduler's surface into submit, describe/cancel by handle, and logs, and submitit its
executor from its job). The registry (launcher/backends/__init__.py) names each engine's
pieces, so a caller asks it for the one it needs:

- the attached backend (launcher/backends/base.py ``Backend``) runs the tasks for the job
  loop; one that is an ``EngineJob`` has the engine hold the run as a job of its own (a
  Slurm allocation or batch job, Kubernetes objects): the run's life asks it
  (launcher/api.py) for the handle kept in state.json, whether the engine will run the job
  again, which attempt this is.
- a ``Submitter``: ``--detach`` hands the whole job to the engine
  (launcher/commands/detach.py): its ``BatchRequest``, plain data, is what ``--detach
  --dry-run`` prints and what ``submit`` runs. An engine without one runs a detached job
  as a daemon on this machine.
- a ``Follower``: a run followed by its handle, whoever started it (``launch status``,
  ``cancel``, model_dir's lease: launcher/commands/runs.py, records/lease.py). Class
  methods: the state.json of a run is all there is. ``Follower`` itself follows a run no
  engine holds: the launcher's alone.

Engine names and handle keys stay in the backend modules that implement these.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    from launcher.backends.base import Backend
    from launcher.plan import JobPlan


class EngineJob(ABC):
    """The engine holds this run as a job of its own."""

    @abstractmethod
    def run_handle(self) -> dict[str, Any]:
        """What names this run in the engine (``{"slurm_job": "12"}``), kept in the run's
        state so that ``launch status`` and ``launch cancel`` find it."""

    def requeued(self) -> bool:
        """After the launcher was interrupted: the engine will run this job again (a
        requeued Slurm batch job), so the run is queued, not cancelled."""
        return False

    def requeue(self) -> bool:
        """After a preemption notice: have the engine run this job again (a Slurm batch job
        that asked for ``--requeue``: its warning signal before the time limit); True when
        it will."""
        return False

    def attempt(self) -> int:
        """How many times this run was started before in the same run directory (a
        requeued Slurm job): TFCLUSTER_RESTART_COUNT of every task."""
        return 0


class BatchRequest(Protocol):
    """What a submitter hands the engine, as plain data (a batch script and its options,
    Kubernetes objects); ``text`` is what ``--detach --dry-run`` prints besides the task
    list."""

    def text(self) -> str: ...


class Submitter(ABC):
    """``--detach`` submits the whole job to the engine, which runs it to its end. Built
    from the attached backend once it accepted the job and placed its tasks: what the
    engine is asked for (an allocation, the objects' names) is the same in both."""

    def __init__(self, backend: Backend):
        self.backend = backend

    @classmethod
    def takes(cls, options: Any) -> bool:
        """The engine runs the job to its end with these options (Kubernetes' plain Jobs
        do not: their ps need the launcher), so ``--detach`` submits it."""
        return True

    @abstractmethod
    def request(self, plan: JobPlan, run_dir: str, relaunch: list[str]) -> BatchRequest:
        """The batch request of the job (``relaunch``: the launcher's command line for
        inside the engine's job)."""

    @abstractmethod
    def submit(self, plan: JobPlan, request: Any) -> dict[str, Any]:
        """Hand ``request`` (this submitter's own) to the engine; return the run's
        handle."""


class Follower:
    """A run followed by its handle (state.json's ``handle``). This class: a run no engine
    holds, which only its launcher knows."""

    @classmethod
    def describe_handle(cls, handle: dict[str, Any]) -> str:
        """What the engine calls the run ('Slurm job 12'), '' when it holds none."""
        return ""

    @classmethod
    def engine_state(cls, handle: dict[str, Any], recorded: str) -> tuple[str, str] | None:
        """A live run's state (``recorded``: state.json's) as the engine sees it now, with
        a note that says so; None when the engine holds nothing of the run."""
        return None

    @classmethod
    def holds(cls, handle: dict[str, Any]) -> bool:
        """The engine still has the run although its launcher may be gone (a requeued
        batch job waiting in the queue): its model_dir lease is kept for it."""
        return False

    @classmethod
    def engine_tasks(cls, handle: dict[str, Any]) -> list[dict[str, Any]] | None:
        """One row per task as the engine shows it, for a run no launcher follows (state.json
        has no rows); None: the engine cannot tell."""
        return None

    @classmethod
    def launcher_inside(cls, handle: dict[str, Any]) -> bool:
        """The run's launcher runs inside the engine's job (a detached Slurm run's batch
        script): no launcher of this machine to stop; the engine's cancel ends it."""
        return False

    @classmethod
    def cancel_run(cls, handle: dict[str, Any], queued: bool) -> None:
        """``launch cancel``: end what the engine holds of the run (``queued``: it has not
        started, or no launcher runs inside it), after the launcher was told to stop."""


def run_handle(backend: object) -> dict[str, Any]:
    """The run's handle in its engine; {} where no engine holds it."""
    return backend.run_handle() if isinstance(backend, EngineJob) else {}


def attempt(backend: object) -> int:
    """Times this run was started before (a requeued batch job); 0 without an engine."""
    return backend.attempt() if isinstance(backend, EngineJob) else 0


def requeued(backend: object) -> bool:
    """The engine will run this job again after the launcher was interrupted."""
    return isinstance(backend, EngineJob) and backend.requeued()


def requeue(backend: object) -> bool:
    """After a preemption notice: the engine was asked to run the job again, and will."""
    return isinstance(backend, EngineJob) and backend.requeue()
