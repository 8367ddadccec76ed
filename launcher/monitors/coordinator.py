"""The coordinator's adapter around orchestrator.coordinator.Coordinator, a monitor the job
loop ticks (launcher/monitors: the ``Monitor`` interface).

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
import os
import re
import time
from typing import Any, Callable

from launcher.ending import TrainingView
from launcher.monitors.own_model_dir import elsewhere_line, open_tf_file, outside
from launcher.output.console import Console
from launcher.output.progress import (
    NOTHING,
    NOTHING_AFTER,
    QUIET_AFTER,
    JobState,
    output_progress,
    progress_fields,
    progress_line,
)
from launcher.records.events import EventLog
from orchestrator.checkpoints import STATE_FILE, CheckpointReader
from orchestrator.coordinator import Coordinator, Progress
from orchestrator.decisions import FINISH, Decision, TaskState
from orchestrator.roles import TRAINERS, primary_task

PROGRESS_EVERY = 5.0     # seconds between progress lines while something changes
PROGRESS_QUIET = 30.0    # ... and while nothing does
# time passing is no change: a bound counting down, an age, a wait growing
COUNTDOWN = re.compile(r"at most \S+ more|after \d\S*|\d\S* ago|for \d+[smh]\S*")
EMPTY = "no checkpoint or summary"
OUTPUT_SOURCE = "'s output"      # a step from the trainers' output
OUTPUT_EVERY = 15.0              # s between two lines that only move the output's step
OUTPUT_STEP = re.compile(r"step ~?\d+(/\d+ \(\d+%\))?|\d\S* ago|[\d.]+ steps/s")
NESTED_DEPTH = 3          # levels below model_dir where a nested checkpoint is looked for




class CoordinatorMonitor:
    """Drives the job loop from model_dir (see the module docstring)."""

    def __init__(self, coordinator: Coordinator, console: Console, events: EventLog,
                 progress_every: float = PROGRESS_EVERY,
                 clock: Callable[[], float] = time.monotonic,
                 not_answering: Callable[[], list[str]] | None = None,
                 evaluator_timeout: float | None = None,
                 on_progress: Callable[[dict[str, Any]], None] | None = None):
        self.coordinator = coordinator
        self.on_progress = on_progress    # the run registry's (state.json's progress)
        self.evaluator_timeout = evaluator_timeout
        self._trainers_ended_at: float | None = None
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
        self._nested: str | None = None     # a checkpoint below model_dir ("": none)
        self._elsewhere_said = False        # a model_dir of the script's own was named
        self._looked_at = -float("inf")     # when the tasks' open files were last looked at
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
        self._elsewhere(p, tasks)
        stopped = {t.name for t in tasks if t.stopped or not t.alive}
        silent = [n for n in (self.not_answering() if self.not_answering else [])
                  if n not in stopped]      # a task the launcher stopped is not "silent"
        state = self.job_state(tasks, now)
        self.console.progress(p, tasks, self._restarts, silent, state)
        if self.on_progress is not None:
            started = self._started if self._started is not None else now
            self.on_progress(progress_fields(p, output_progress(self.console.steps, p, now,
                                                                started), now))
        self._maybe_print(p, now, silent, state)
        decision = self.coordinator.judge(tasks)
        if decision is None:
            return None
        if self._decided != (decision.action, decision.reason):
            if decision.action == FINISH:    # where training stands at its end
                self._maybe_print(p, now, silent, state, force=True)
            self._decided = (decision.action, decision.reason)
            self.events.write("coordinator", action=decision.action, reason=decision.reason,
                              tasks=list(decision.tasks), step=p.step,
                              checkpoint=p.checkpoint.name if p.checkpoint else None)
        return decision

    def job_state(self, tasks: list[TaskState], now: float) -> JobState:
        """What the tasks are doing, for the progress line."""
        trainers = [t for t in tasks if t.type in TRAINERS]
        running = tuple(t.name for t in trainers if t.running)
        # ended: exited and not about to be restarted (TaskState.alive False); a trainer
        # still being started (tasks start in a pool while the monitors tick) is alive
        ended = bool(trainers) and not any(t.alive for t in trainers)
        if not ended:
            self._trainers_ended_at = None
        elif self._trainers_ended_at is None:
            self._trainers_ended_at = now
        finishing = self._finishing(tasks)
        return JobState(
            restarting=tuple(t.name for t in tasks if t.restarting), finishing=finishing,
            trainers=running, trainers_ended=ended,
            evaluators=tuple(t.name for t in tasks if t.type == "evaluator" and t.running),
            ps=tuple(t.name for t in tasks if t.type == "ps" and t.running),
            ended_for=now - self._trainers_ended_at if self._trainers_ended_at else 0.0,
            evaluator_timeout=self.evaluator_timeout)

    def _finishing(self, tasks: list[TaskState]) -> str | None:
        """Why training is being finished: the decision said, else the primary's exit 0."""
        if self._decided is not None and self._decided[0] == FINISH:
            return self._decided[1]
        primary = primary_exited_0(tasks)
        return f"{primary} exited 0" if primary else None

    def _maybe_print(self, p: Progress, now: float, silent: list[str],
                     state: JobState | None = None, force: bool = False) -> None:
        last, at = self._last_line
        if now - at < self.progress_every and not force:
            return
        started = self._started if self._started is not None else now
        steps = self.console.steps
        line = progress_line(p, now - started, self._restarts, now, silent, state,
                             output_progress(steps, p, now, started),
                             steps.moving(now, QUIET_AFTER),
                             self._nothing(p, now - started))
        once = EMPTY in line and EMPTY in last     # said once: nothing new to say
        changed = COUNTDOWN.sub("", line) != COUNTDOWN.sub("", last)  # not the time left alone
        if changed and OUTPUT_SOURCE in line and OUTPUT_SOURCE in last and \
                OUTPUT_STEP.sub("", line) == OUTPUT_STEP.sub("", last):   # the output's step
            changed = now - at >= OUTPUT_EVERY          # moving: said every 15 s, not 5
        if changed or (now - at >= PROGRESS_QUIET and not once):
            self.console.progress_line(line)
            self._last_line = (line, now)

    def _elsewhere(self, p: Progress, tasks: list[TaskState]) -> None:
        """Once: a trainer that writes into a model_dir of its own (its Estimator's "Using
        config" record, or a TensorFlow file it holds open while this model_dir has
        none), named in one line."""
        if self._elsewhere_said:
            return
        model_dir = self.coordinator.reader.model_dir
        for task, where in sorted(self.console.steps.model_dirs.items()):
            if outside(where, model_dir):
                self._say_elsewhere(task, where, "its Estimator's \"Using config\" record")
                return
        now = self.clock()
        if p.checkpoint is not None or p.events_step is not None or \
                now - self._looked_at < self.progress_every:
            return
        self._looked_at = now
        for t in tasks:
            if t.type in TRAINERS and t.alive:
                path = open_tf_file(t.pid)
                if path is not None and outside(path, model_dir):
                    self._say_elsewhere(t.name, os.path.dirname(path),
                                        f"it holds {os.path.basename(path)} open there")
                    return

    def _say_elsewhere(self, task: str, where: str, how: str) -> None:
        self._elsewhere_said = True
        model_dir = self.coordinator.reader.model_dir
        self.console.info(elsewhere_line(task, where, how, model_dir))
        self.events.write("model_dir_elsewhere", task=task, path=where, how=how)

    def _nothing(self, p: Progress, waited: float) -> str:
        """What model_dir holds while it has no checkpoint or summary of its own: once
        NOTHING_AFTER passed, a checkpoint in a folder below (Keras' BackupAndRestore
        writes model_dir/backup/chief/..., deleted once training ends) is named."""
        if p.checkpoint is not None or p.events_step is not None or waited < NOTHING_AFTER:
            return NOTHING
        if self._nested is None:
            self._nested = nested_checkpoint(self.coordinator.reader) or ""
        if not self._nested:
            return NOTHING
        return ("no checkpoint or summary at model_dir's top yet after {waited}; a "
                f"checkpoint in {self._nested} (Keras' BackupAndRestore backup, if it is one)")

    def training_view(self) -> TrainingView:
        """What model_dir says, for the job loop's end rules (which ask only once training
        is done: from then on the coordinator also follows writes into model_dir)."""
        self.coordinator.follow_writes()
        p = self.coordinator.progress()
        written_for = self.clock() - p.written_at if p.written_at is not None else None
        return TrainingView(max_steps=p.max_steps, latest_step=p.latest_step,
                            final_step=p.step, evaluated_step=p.evaluated_step,
                            written_for=written_for, written=p.written)

    def close(self) -> None:
        # The closing lines come from one last read of model_dir (launcher/output/closing.py).
        self.coordinator.stop()


def nested_checkpoint(reader: CheckpointReader) -> str | None:
    """The folder, relative to model_dir, of a checkpoint state file below its top (up to
    NESTED_DEPTH levels), None when there is none or model_dir cannot be listed."""
    for depth in range(1, NESTED_DEPTH + 1):
        try:
            found = reader.fs.glob(f"{reader.root}/{'*/' * depth}{STATE_FILE}")
        except (OSError, ValueError):
            return None
        for path in sorted(found):
            return path[len(reader.root):].strip("/").rsplit("/", 1)[0] + "/"
    return None


def primary_exited_0(tasks: list[TaskState]) -> str | None:
    """The primary task (chief, else master, else worker 0) when it exited 0 by itself."""
    primary = primary_task(tasks)
    done = primary is not None and not primary.alive and primary.exit_status == "0" and \
        not primary.stopped
    return primary.name if primary is not None and done else None
