"""``timeouts.job``: the whole job's deadline. When it passes, the job ends the way any
failure ends it (every task stopped, ps last, SIGKILL after ``timeouts.kill``) with a reason
that says so. 0 (the default) means no deadline."""

from __future__ import annotations

import time
from typing import Callable


class DeadlineMonitor:
    """A job loop monitor that fails the job once ``seconds`` passed since its first tick."""

    def __init__(self, seconds: float, clock: Callable[[], float] = time.monotonic):
        self.seconds = seconds
        self.clock = clock
        self.started: float | None = None

    def tick(self, job):
        from launcher.job import Decision

        now = self.clock()
        if self.started is None:
            self.started = now
        if now - self.started >= self.seconds:
            return Decision("fail", f"the job's deadline passed (timeouts.job = "
                                    f"{self.seconds:g}s): stopping every task")
        return None

    def close(self) -> None:
        pass


def deadline_monitor(timeouts: dict[str, float]) -> list[DeadlineMonitor]:
    """The deadline monitor when the spec sets ``timeouts.job``, else nothing."""
    seconds = timeouts.get("job") or 0
    return [DeadlineMonitor(seconds)] if seconds > 0 else []
