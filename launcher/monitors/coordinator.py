"""The monitors the job loop ticks: the ``Monitor`` interface, and the coordinator's
adapter around orchestrator.coordinator.Coordinator.

Every few seconds it prints a progress line (step / max_steps, steps per second, ETA, the
newest checkpoint, the latest evaluation from ``tfcluster_metrics.jsonl``), writes what it
sees to the run's event log (``checkpoint``, ``checkpoint_incomplete``, ``coordinator``),
and ends the job:

- ``finish`` once the newest complete checkpoint reached max_steps: the job loop's end
  rules (launcher/ending.py) then stop trainers that keep going, the ps, and the evaluator
  once it evaluated the final checkpoint; they read ``training_view()`` (step, final
  checkpoint, newest evaluated step) every turn;
- ``lost`` when a ps died while trainers run (naming it, so a restart policy can act);
- ``fail`` when no new step or checkpoint came for ``timeouts.stall`` seconds
  (``timeouts.start`` + ``timeouts.stall`` before the first checkpoint), naming the
  silent tasks.
"""

from __future__ import annotations

import collections
import time
from typing import Any, Callable, Protocol

from launcher.ending import TrainingView
from launcher.events import EventLog
from launcher.output.console import Console
from launcher.output.progress import progress_line
from orchestrator.coordinator import Coordinator, Progress
from orchestrator.decisions import FINISH, Decision, TaskState

TURN = 0.05              # seconds between the job loop's turns
TICK_COST = 1e-5         # seconds of a monitor's tick per task (measured: bench/scale.py)
PROGRESS_EVERY = 5.0     # seconds between progress lines while something changes
PROGRESS_QUIET = 30.0    # ... and while nothing does


def tick_every(tasks: int) -> float:
    """Seconds between the job loop's monitor ticks: every turn up to 250 tasks; then
    longer, so that ticks whose work is O(N) keep under ~0.2 % of a core (0.2 s at
    N = 1,000)."""
    return max(TURN, tasks * TICK_COST / 0.05)


class Monitor(Protocol):
    """Watches the job. ``tick`` gets a snapshot of the tasks on every loop turn, must not
    block (slow work belongs in the monitor's own thread) and may answer with a Decision:
    ``finish``, ``fail`` or ``lost`` (orchestrator/decisions.py)."""

    def tick(self, tasks: list[TaskState]) -> Decision | None: ...

    def close(self) -> None: ...


class CoordinatorMonitor:
    """Drives the job loop from model_dir (see the module docstring)."""

    def __init__(self, coordinator: Coordinator, console: Console, events: EventLog,
                 progress_every: float = PROGRESS_EVERY,
                 clock: Callable[[], float] = time.monotonic,
                 not_answering: Callable[[], list[str]] | None = None):
        self.coordinator = coordinator
        self.console = console
        self.events = events
        self.progress_every = progress_every
        self.clock = clock
        self.not_answering = not_answering    # tasks silent on gRPC (launcher/monitors/liveness.py)
        self._started: float | None = None
        self._last_line = ("", 0.0)
        self._decided: tuple[str, str] | None = None
        self._restarts = 0          # restart incidents (a cluster restart is one)
        self._restarted = 0         # task restarts
        # What the coordinator's thread saw, written out by tick() on the job loop's
        # thread: every event lands between job_started and job_ended.
        self._seen: collections.deque = collections.deque()
        coordinator.on_change = self._note

    def _note(self, event: str, fields: dict[str, Any]) -> None:
        self._seen.append((event, fields))

    def _flush(self) -> None:
        while self._seen:
            event, fields = self._seen.popleft()
            self.events.write(event, **fields)
            if event == "checkpoint_incomplete":
                self.console.info(f"checkpoint {fields['name']} is incomplete: missing "
                                  f"{', '.join(fields['missing'])}")

    def tick(self, tasks: list[TaskState]) -> Decision | None:
        now = self.clock()
        if self._started is None:
            self._started = now
            self.coordinator.start()
        self._flush()
        restarted = sum(t.restarts for t in tasks)
        if restarted != self._restarted:     # tasks started again in one turn: one incident
            self._restarted = restarted
            self._restarts += 1
            self.coordinator.note_restart()
        p = self.coordinator.progress()
        silent = self.not_answering() if self.not_answering else []
        self.console.progress(p, tasks, self._restarts, silent)
        self._maybe_print(p, now, silent)
        decision = self.coordinator.judge(tasks)
        if decision is None:
            return None
        if self._decided != (decision.action, decision.reason):
            if decision.action == FINISH:
                self._maybe_print(p, now, silent, force=True)   # where training stands at its end
            self._decided = (decision.action, decision.reason)
            self.events.write("coordinator", action=decision.action, reason=decision.reason,
                              tasks=list(decision.tasks), step=p.step,
                              checkpoint=p.checkpoint.name if p.checkpoint else None)
        return decision

    def _maybe_print(self, p: Progress, now: float, silent: list[str],
                     force: bool = False) -> None:
        last, at = self._last_line
        if now - at < self.progress_every and not force:
            return
        line = progress_line(p, now - (self._started or now), self._restarts, now, silent)
        if line != last or now - at >= PROGRESS_QUIET:
            self.console.progress_line(line)
            self._last_line = (line, now)

    def training_view(self) -> TrainingView:
        """What model_dir says, for the job loop's end rules."""
        p = self.coordinator.progress()
        return TrainingView(max_steps=p.max_steps, latest_step=p.latest_step,
                            final_step=p.step, evaluated_step=p.evaluated_step)

    def close(self) -> None:
        # The closing lines come from one last read of model_dir (launcher/output/closing.py).
        self.coordinator.stop()

