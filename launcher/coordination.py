"""The coordinator in the job loop: a ``Monitor`` (launcher/job.py) around
orchestrator.coordinator.Coordinator.

Every few seconds it prints a progress line (step / max_steps, steps per second, ETA, the
newest checkpoint, the latest evaluation from ``tfcluster_metrics.jsonl``), writes what it
sees to the run's event log (``checkpoint``, ``checkpoint_incomplete``, ``coordinator``),
and ends the job:

- ``finish`` once the newest complete checkpoint reached max_steps: the job loop then lets
  the trainers end on their own for ``timeouts.finish`` (and the evaluator for
  ``timeouts.evaluator``) and stops what keeps going (trainers whose input repeats, ps);
- ``fail`` when a ps died while trainers run (naming it, so a restart policy can act), or
  when no new step or checkpoint came for ``timeouts.stall`` seconds (``timeouts.start`` +
  ``timeouts.stall`` before the first checkpoint), naming the silent tasks.
"""

from __future__ import annotations

import collections
import os
import time
from typing import Any

from launcher.events import EventLog
from launcher.job import Console, Decision, Job, TaskRun
from orchestrator.checkpoints import CheckpointReader
from orchestrator.coordinator import Coordinator, Progress, TaskStatus

PROGRESS_EVERY = 5.0     # seconds between progress lines while something changes
PROGRESS_QUIET = 30.0    # ... and while nothing does
FIRST_METRICS = ("loss", "accuracy", "auc")   # shown first in the progress line


def launcher_model_dir(spec) -> str:
    """model_dir as the launcher sees it: a relative local path is relative to the tasks'
    working directory (``workdir``) when the spec sets one, as it is for the tasks."""
    url = spec.model_dir
    if "://" in url or os.path.isabs(url) or not spec.workdir:
        return url
    return os.path.join(spec.workdir, url)


def storage_options(spec) -> dict[str, Any]:
    """fsspec options for the launcher's own view of model_dir: S3 credentials and endpoint
    given to the tasks in the spec's ``env`` serve the launcher too (the launcher's own
    environment is used otherwise)."""
    if not spec.model_dir.startswith(("s3://", "s3a://")):
        return {}
    env = spec.env
    options: dict[str, Any] = {}
    if env.get("AWS_ACCESS_KEY_ID") and env.get("AWS_SECRET_ACCESS_KEY"):
        options.update(key=env["AWS_ACCESS_KEY_ID"], secret=env["AWS_SECRET_ACCESS_KEY"])
        if env.get("AWS_SESSION_TOKEN"):
            options["token"] = env["AWS_SESSION_TOKEN"]
    endpoint = env.get("AWS_ENDPOINT_URL_S3") or env.get("AWS_ENDPOINT_URL")
    if endpoint:
        options["client_kwargs"] = {"endpoint_url": endpoint}
    return options


# TF2 scripts save with ``CheckpointManager.save(checkpoint_number=step)`` (as examples/
# do), so ``ckpt-N`` is read as step N. With a plain ``save()`` N counts saves, and the
# progress line shows that count; it never ends a job early: a job saves at most once per
# step, so the count never runs ahead of the step.
TF2_NUMBER_IS_STEP = True


def checkpoint_reader(spec) -> CheckpointReader:
    """The reader of model_dir as the launcher sees it."""
    return CheckpointReader(launcher_model_dir(spec), storage_options(spec),
                            tf2_number_is_step=TF2_NUMBER_IS_STEP)


def task_status(run: TaskRun, restarting: bool = False) -> TaskStatus:
    """A task as the coordinator judges it; one the job loop is about to restart is not
    dead (its restart policy already acted)."""
    ended = run.status is not None and not restarting
    return TaskStatus(run.name, run.task.type, run.task.address, alive=not ended,
                      exit_status=run.status_text() if ended else None, stopped=run.stopped)


def _duration(secs: float) -> str:
    secs = int(round(secs))
    if secs < 60:
        return f"{secs}s"
    if secs < 3600:
        return f"{secs // 60}m{secs % 60:02d}s"
    return f"{secs // 3600}h{secs % 3600 // 60:02d}m"


def progress_line(p: Progress, waited: float, restarts: int = 0) -> str:
    """One line: where training stands (the step from the events file when it is ahead of
    the newest complete checkpoint), and how many restarts it took so far."""
    ckpt, step = p.checkpoint, p.latest_step
    if step is None:
        line = (f"checkpoint {ckpt.name} (save {ckpt.number}; TF2 names count saves, not steps)"
                if ckpt else f"waiting for the first checkpoint ({_duration(waited)})")
    else:
        total = f"/{p.max_steps} ({100 * min(step, p.max_steps) // p.max_steps}%)" \
            if p.max_steps else ""
        line = f"step {step}{total}"
        if p.steps_per_sec is not None:
            line += f", {p.steps_per_sec:.1f} steps/s"
        if p.eta_secs is not None and not p.reached_max_steps:
            line += f", ETA {_duration(p.eta_secs)}"
        line += f", checkpoint {ckpt.name}" if ckpt else ", no complete checkpoint yet"
    if p.latest_eval:
        ev = p.latest_eval
        shown = sorted(ev.get("metrics", {}).items(),
                       key=lambda kv: (FIRST_METRICS.index(kv[0])
                                       if kv[0] in FIRST_METRICS else len(FIRST_METRICS), kv[0]))
        metrics = ", ".join(f"{k}={v:.4g}" if isinstance(v, (int, float)) else f"{k}={v}"
                            for k, v in shown[:4])
        line += f"; eval at step {ev.get('step')}: {metrics}"
    if restarts:
        line += f"; {restarts} restart{'s' if restarts > 1 else ''}"
    if p.last_error:
        line += f" [model_dir not readable: {p.last_error}]"
    return f"progress: {line}"


class CoordinatorMonitor:
    """Drives the job loop from model_dir (see the module docstring)."""

    def __init__(self, coordinator: Coordinator, console: Console, events: EventLog,
                 progress_every: float = PROGRESS_EVERY):
        self.coordinator = coordinator
        self.console = console
        self.events = events
        self.progress_every = progress_every
        self._started: float | None = None
        self._last_line = ("", 0.0)
        self._decided: tuple[str, str] | None = None
        self._restarts = 0
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

    def tick(self, job: Job) -> Decision | None:
        now = time.monotonic()
        if self._started is None:
            self._started = now
            self.coordinator.start()
        self._flush()
        restarts = job.restart_count
        if restarts != self._restarts:
            self._restarts = restarts
            self.coordinator.note_restart()
        p = self.coordinator.progress()
        self._maybe_print(p, now)
        due = getattr(job, "due", {})      # restarts the job loop has scheduled
        verdict = self.coordinator.judge([task_status(r, r.name in due) for r in job.runs])
        if verdict is None:
            return None
        if self._decided != (verdict.action, verdict.reason):
            self._decided = (verdict.action, verdict.reason)
            self.events.write("coordinator", action=verdict.action, reason=verdict.reason,
                              tasks=list(verdict.tasks), step=p.step,
                              checkpoint=p.checkpoint.name if p.checkpoint else None)
        return make_decision(verdict.action, verdict.reason,
                             verdict.tasks[0] if len(verdict.tasks) == 1 and
                             verdict.tasks[0].startswith("ps:") else None)

    def _maybe_print(self, p: Progress, now: float) -> None:
        last, at = self._last_line
        if now - at < self.progress_every:
            return
        line = progress_line(p, now - (self._started or now), self._restarts)
        if line != last or now - at >= PROGRESS_QUIET:
            self.console.info(line)
            self._last_line = (line, now)

    def close(self) -> None:
        self.coordinator.stop()
        if self._started is None:
            return
        p = self.coordinator.progress()     # no new poll: job_ended is the last event
        if p.max_steps is not None and p.step is not None and p.step < p.max_steps:
            self.console.info(f"note: the newest complete checkpoint is at step {p.step}, "
                              f"short of max_steps {p.max_steps}")


def make_decision(action: str, reason: str, task: str | None) -> Decision:
    """A Decision; it names the lost task when the job loop's Decision has that field."""
    if task is not None and "task" in getattr(Decision, "__dataclass_fields__", {}):
        return Decision(action, reason, task=task)  # type: ignore[call-arg]
    return Decision(action, reason)


def coordinator_monitor(spec, plan, console: Console, events: EventLog) -> CoordinatorMonitor:
    """The monitor ``launcher.cli.monitors_for`` hands the job loop."""
    coordinator = Coordinator(launcher_model_dir(spec), max_steps=plan.max_steps,
                              poll=spec.timeouts["poll"], stall=spec.timeouts["stall"],
                              startup=spec.timeouts["start"], reader=checkpoint_reader(spec))
    return CoordinatorMonitor(coordinator, console, events)
