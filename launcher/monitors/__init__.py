"""Monitors the job loop ticks (launcher/job.py): the coordinator's adapter over model_dir
(``coordinator``), the tasks' TF servers asked over gRPC (``liveness``), the whole-job
deadline (``deadline``). Each sees a snapshot of the tasks, never the Job. Here: what they
are to the job loop (``Monitor``, ``Readiness``) and what watches one job (``Watch``, which
launcher/api.py builds); the loop's one way in to them: ``watching.Watching``."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Callable, Protocol

if TYPE_CHECKING:
    from launcher.ending import TrainingView
    from orchestrator.decisions import Decision, TaskState

TURN = 0.05              # seconds between the job loop's turns
TICK_COST = 1e-5         # seconds of a monitor's tick per task (measured: bench/scale.py)


def tick_every(tasks: int) -> float:
    """Seconds between the job loop's monitor ticks: every turn up to 250 tasks; then
    longer, so that ticks whose work is O(N) stay about 0.2 % of a core (every 0.2 s at
    N = 1,000)."""
    return max(TURN, tasks * TICK_COST / 0.05)


class Monitor(Protocol):
    """Watches the job. ``tick`` gets a snapshot of the tasks on every loop turn, must not
    block (slow work belongs in the monitor's own thread) and may answer with a Decision:
    ``finish``, ``fail`` or ``lost`` (orchestrator/decisions.py)."""

    def tick(self, tasks: list[TaskState]) -> Decision | None: ...

    def close(self) -> None: ...


class Readiness(Protocol):
    """Says whether a task answered since its start (the liveness monitor does)."""

    def answered(self, name: str, since: float | None) -> bool: ...

    def not_ready_reason(self, name: str, address: str) -> str: ...


@dataclass
class Watch:
    """What watches one job: its monitors, the readiness of its ps (the liveness monitor)
    and model_dir as the end rules read it (the coordinator's view)."""

    monitors: list[Monitor] = field(default_factory=list)
    readiness: Readiness | None = None
    training: Callable[[], TrainingView] | None = None
