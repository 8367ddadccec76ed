"""Where training stands according to the trainers' own output, for the progress line when
model_dir says less (a checkpoint every 600 s, an events file flushed every 120 s, Keras
writing its step once per epoch, an Estimator with MultiWorkerMirrored writing only its
first and last checkpoint).

Read from every task line, also those the console hides (launcher/output/noise.py):
- Estimator's and ``LoggingTensorHook``'s ``loss = 0.69, step = 101 (0.3 sec)``: the global
  step;
- Keras' bar (``35/70 [=====>....] - ETA: 1s``, Keras 3's ``35/70 ━━━━━ 0s 5ms/step``)
  after ``Epoch 2/3``: step (epoch - 1) · steps per epoch + 35; with ``verbose=2``, the
  epoch's one line (``70/70 - 1s - 13ms/step - loss: 0.69``);
- ``global_step/sec: 41.2`` (``MonitoredTrainingSession``'s step counter): no step, a rate;
  steps since a known step are estimated from it (``estimate``), and say so.

And the model_dir a task's Estimator says it uses (``Using config: {'_model_dir': ...``,
``Using temporary folder as model directory: ...``): a script may hard-code its own.

Pure parsing and a small per-task record; no I/O, no TensorFlow.
"""

from __future__ import annotations

import collections
import re
import threading
import time
from dataclasses import dataclass
from typing import Callable

# Estimator's "loss = 0.69, step = 101 (0.3 sec)"; TF's warning of a step seen twice
# ("It seems that global step ... has not been increased. Current value (could be stable):
# 253 vs previous value: 253"): the global step, also in a TF1 job that logs no INFO
STEP_LINE = re.compile(r"\bstep = (\d+)\b|Current value \(could be stable\): (\d+)")
RATE_LINE = re.compile(r"\bglobal_step/sec: ([0-9]+(?:\.[0-9]*)?(?:[eE][-+]?\d+)?)")
EPOCH_LINE = re.compile(r"^Epoch (\d+)/(\d+)\s*$")
# the bar (verbose=1), or the line per epoch of verbose=2 ("4/4 - 0s - 13ms/step - loss: ...")
BAR_LINE = re.compile(r"^\s*(\d+)/(\d+|Unknown)\s+(?:\[[=>.]*\]|━|- \d)")
OWN_MODEL_DIR = re.compile(r"Using config: \{'_model_dir': '([^']+)'|"
                           r"Using temporary folder as model directory: (\S+)")
ANSI = re.compile(r"\x1b\[[0-9;]*[A-Za-z]")
RATES_KEPT = 400      # global_step/sec lines kept per task
FIRST_QUIET = 60.0    # s a first step line counts as current while the pace is unknown
STALE = 30.0          # s: a task's step this much older than the freshest one is left out


@dataclass(frozen=True)
class OutputStep:
    """The newest step a trainer's output showed: ``step`` at ``at`` (clock time of the
    line that first showed it), from ``task``."""

    step: int
    task: str
    at: float


@dataclass
class _Task:
    """One trainer's step lines as read so far."""

    step: int | None = None
    step_at: float = 0.0
    every: float = 0.0       # s between its last two step lines, or two rate lines
    epoch: int = 1
    per_epoch: int | None = None
    rates: collections.deque = None  # type: ignore[assignment]

    def __post_init__(self) -> None:
        self.rates = collections.deque(maxlen=RATES_KEPT)


class TrainerSteps:
    """Every task's output, line by line (``see``); ``newest()`` the freshest step shown,
    ``moving_at()`` when a trainer's output last showed a step or a rate."""

    def __init__(self, clock: Callable[[], float] = time.monotonic):
        self.clock = clock
        self._tasks: dict[str, _Task] = {}
        self._lock = threading.Lock()
        self.model_dirs: dict[str, str] = {}    # task -> the model_dir its Estimator uses

    def see(self, name: str, line: str) -> None:
        if "Using " in line:
            m = OWN_MODEL_DIR.search(line)
            if m:
                self.model_dirs[name] = m.group(1) or m.group(2)
                return
        if "step" not in line and "/" not in line:
            return          # neither a step line, a rate nor a bar: most lines
        text = ANSI.sub("", line)
        now = self.clock()
        with self._lock:
            task = self._tasks.setdefault(name, _Task())
            m = STEP_LINE.search(text)
            if m:
                self._set(task, int(m.group(1) or m.group(2)), now)
                return
            m = RATE_LINE.search(text)
            if m:
                if task.rates:      # one line every 100 steps, as the step lines
                    task.every = max(task.every, now - task.rates[-1][0])
                task.rates.append((now, float(m.group(1))))
                return
            m = EPOCH_LINE.match(text)
            if m:
                task.epoch = int(m.group(1))
                return
            m = BAR_LINE.match(text)
            if m:
                done = int(m.group(1))
                if m.group(2) != "Unknown":
                    task.per_epoch = int(m.group(2))
                per_epoch = task.per_epoch or 0
                self._set(task, (task.epoch - 1) * per_epoch + done, now)

    @staticmethod
    def _set(task: _Task, step: int, now: float) -> None:
        if step != task.step:
            if task.step is not None:
                task.every = now - task.step_at
            task.step, task.step_at = step, now

    def quiet_after(self, least: float) -> float:
        """Seconds without a new line after which the trainers' output counts as quiet:
        ``least``, or twice the longest interval between a task's last two lines (an
        Estimator logs its step every 100 steps: 20 s apart at 5 steps/s); FIRST_QUIET
        while no task wrote two yet (its pace is not known)."""
        with self._lock:
            every = [2 * t.every for t in self._tasks.values() if t.every > 0]
        return max([least] + every) if every else max(least, FIRST_QUIET)

    def moving(self, now: float, least: float) -> float | None:
        """When a trainer's output last showed a new step or a rate, while that counts as
        moving (``quiet_after``); None once quiet."""
        at = self.moving_at()
        return at if at is not None and now - at < self.quiet_after(least) else None

    def newest(self) -> OutputStep | None:
        """The highest step any trainer's output showed, the latest such line's."""
        with self._lock:
            seen = [(t.step, t.step_at, n) for n, t in self._tasks.items()
                    if t.step is not None]
        if not seen:
            return None
        freshest = max(at for _, at, _ in seen)      # a restarted task's old step is not
        step, at, name = max(s for s in seen if s[1] >= freshest - STALE)      # current
        return OutputStep(step, name, at)

    def rate(self) -> tuple[str, float, float] | None:
        """The newest ``global_step/sec`` any task wrote: (task, steps/s, when)."""
        with self._lock:
            seen = [(t.rates[-1][0], t.rates[-1][1], n) for n, t in self._tasks.items()
                    if t.rates]
        if not seen:
            return None
        at, rate, name = max(seen)
        return name, rate, at

    def estimate(self, since: float) -> tuple[int, str] | None:
        """Steps taken after ``since`` by the rates one task reported (each
        ``global_step/sec`` line covers the time since the one before it): (steps, task),
        None without a rate reported after ``since``."""
        with self._lock:
            best = None
            for name, task in self._tasks.items():
                steps, before = 0.0, since
                for at, rate in task.rates:
                    if at <= since:
                        before = at
                        continue
                    steps += rate * (at - max(before, since))
                    before = at
                if before > since and (best is None or steps > best[0]):
                    best = (steps, name)
        return (int(best[0]), best[1]) if best is not None else None

    def moving_at(self) -> float | None:
        """When a trainer's output last showed a new step or a rate."""
        with self._lock:
            times = [t.step_at for t in self._tasks.values() if t.step is not None]
            times += [t.rates[-1][0] for t in self._tasks.values() if t.rates]
        return max(times) if times else None
