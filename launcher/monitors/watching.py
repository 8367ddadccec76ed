"""The job loop's one way in for monitors: what watches the job (``Watch``: the caller's
monitors, the ps' readiness, model_dir's view), taken at once or built once the tasks
started, ticked with one snapshot of the tasks, answering with decisions."""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from typing import TYPE_CHECKING, Callable

from launcher.ending import TrainingView
from launcher.monitors import TURN, Watch, tick_every

if TYPE_CHECKING:
    from orchestrator.decisions import Decision, TaskState

WATCH_WITHIN = 2.0     # s: the monitors wait for the tasks' starts at most this long


class Watching:
    """``watch``: a ``Watch`` taken at once, or built by calling it once every task
    started (at most ``WATCH_WITHIN`` s in: its modules load and model_dir is read while
    the tasks boot, not while they are being started). ``tasks``: how many the job has
    (the monitors tick less often with many)."""

    def __init__(self, watch: Watch | Callable[[], Watch] | None, tasks: int,
                 clock: Callable[[], float]):
        self.watch = watch if isinstance(watch, Watch) else Watch()
        self._build = None if isinstance(watch, Watch) else watch
        self.clock = clock
        self.every = tick_every(tasks)      # longer with many tasks
        self._ticked = -float("inf")        # when the loop's monitors last ticked
        self._quietly = -float("inf")       # ... and those of a preemption's wait

    def attach(self, starting: bool, since: float) -> None:
        """Build the caller's monitors once no task is starting, or ``WATCH_WITHIN`` s
        after ``since`` (the job's start)."""
        if self._build is not None and (not starting or self.clock() - since >= WATCH_WITHIN):
            built, self._build = self._build(), None
            self.watch = Watch(self.watch.monitors + built.monitors,
                               self.watch.readiness or built.readiness,
                               self.watch.training or built.training)

    def decisions(self, snapshot: Callable[[], list[TaskState]]) -> Iterator[Decision]:
        """When it is time: one snapshot for every monitor, and each one's decision (taken
        lazily: the loop stops at one that ends the job)."""
        if not self.watch.monitors or (self.every > TURN and
                                       self.clock() - self._ticked < self.every):
            return
        tasks = snapshot()
        self._ticked = self.clock()
        for monitor in self.watch.monitors:
            decision = monitor.tick(tasks)
            if decision is not None:
                yield decision

    def tick_quietly(self, snapshot: Callable[[], list[TaskState]]) -> None:
        """While a preemption's save is waited for: the monitors ticked (model_dir's view
        kept fresh), their decisions not acted on."""
        if self.clock() - self._quietly >= self.every:
            self._quietly = self.clock()
            tasks = snapshot()
            for monitor in self.watch.monitors:
                monitor.tick(tasks)

    def training(self, max_steps: int | None) -> TrainingView:
        """What model_dir says (the coordinator's view), or only max_steps without one."""
        view = self.watch.training
        return view() if view is not None else TrainingView(max_steps=max_steps)

    def silent_ps(self, started: Iterable[tuple[str, str, float]], start_timeout: float
                  ) -> str | None:
        """Why the job fails when a running ps has not answered TensorFlow's gRPC
        ``start_timeout`` s after its start (``started``: name, address, start time of
        each), or None (no readiness watched: every ps counts as ready)."""
        readiness = self.watch.readiness
        if readiness is None:
            return None
        for name, address, since in started:
            if self.clock() - since >= start_timeout and not readiness.answered(name, since):
                return readiness.not_ready_reason(name, address)
        return None

    def close(self) -> None:
        for monitor in self.watch.monitors:
            try:
                monitor.close()
            except Exception:   # noqa: BLE001 - closing must not hide the result
                pass
