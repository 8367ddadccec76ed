"""``timeouts.job``: the whole job's deadline. When it passes, the job ends the way any
failure ends it (every task stopped, SIGKILL after ``timeouts.kill``) with a reason that
says so. 0 (the default) means no deadline."""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Callable

from orchestrator.decisions import FAIL, Decision, TaskState

if TYPE_CHECKING:
    from launcher.spec import Timeouts


class DeadlineMonitor:
    """A job loop monitor that fails the job ``seconds`` after its first tick (the tasks
    have just been started then)."""

    def __init__(self, seconds: float, clock: Callable[[], float] = time.monotonic):
        self.seconds = seconds
        self.clock = clock
        self.started: float | None = None

    def tick(self, tasks: list[TaskState]) -> Decision | None:
        now = self.clock()
        if self.started is None:
            self.started = now
        if now - self.started >= self.seconds:
            return Decision(FAIL, f"the job's deadline passed (timeouts.job = "
                                  f"{self.seconds:g}s): every task is stopped")
        return None

    def close(self) -> None:
        pass


def deadline_monitor(timeouts: Timeouts,
                     clock: Callable[[], float] = time.monotonic) -> list[DeadlineMonitor]:
    """The deadline monitor when the plan sets ``timeouts.job``, else nothing."""
    seconds = timeouts.job
    return [DeadlineMonitor(seconds, clock)] if seconds > 0 else []
