"""The notices that make the savers save before their tasks are stopped (the rules and the
record of one notice: launcher/ending.py): a preemption (SIGTERM to the launcher while
training runs, ``timeouts.preempt`` > 0) and the save request at max_steps (the step
reached max_steps and no complete checkpoint covers it). Each is sent to the savers, again
every RESEND s until they answer, and its wait is over by ``ending.over``."""

from __future__ import annotations

import signal
from dataclasses import replace
from typing import Callable

from launcher.ending import (
    AT_MAX_STEPS,
    PREEMPTION,
    RESEND,
    Notice,
    TrainingView,
    over,
    save_due,
    savers,
)
from launcher.monitors import TURN
from launcher.output.console import Console
from launcher.plan import JobPlan
from launcher.records.events import EventLog
from launcher.tasks import TaskRun, Tasks
from orchestrator.decisions import TaskState
from orchestrator.preemption import ANSWER, NOTICE
from orchestrator.roles import TRAINERS, names_text

HANDLER_EXIT = 42      # PreemptionCheckpointHandler's exit after its save (TensorFlow's default)


def answers(notified: list[TaskRun], answered: dict[str, str]) -> dict[str, str]:
    """The notified tasks' first answer lines to the notice (ANSWER), beyond ``answered``."""
    found = {}
    for run in notified:
        if run.name not in answered:
            line = next((line for line in run.tail if ANSWER in line), None)
            if line is not None:
                found[run.name] = line
    return found


class Notices:
    """A job's preemption notice and save request at max_steps. ``snapshot`` and ``view``
    are the job loop's (every task now; model_dir as the end rules read it);
    ``training_done``: called when the save request is sent (training is done from then)."""

    def __init__(self, plan: JobPlan, sends: int, tasks: Tasks, console: Console,
                 events: EventLog, snapshot: Callable[[], list[TaskState]],
                 view: Callable[[list[TaskState]], TrainingView],
                 training_done: Callable[[], None]):
        self.plan, self.tasks, self.console, self.events = plan, tasks, console, events
        self.sends = signal.SIGTERM if plan.synchronous else sends
        self.snapshot, self.view, self.training_done = snapshot, view, training_done
        self.notice: Notice | None = None     # a preemption notice
        self.request: Notice | None = None    # the save request at max_steps
        self._requested_to: list[TaskRun] = []   # ... and the savers it went to
        self._request_over = False      # ... its wait is over
        self._max_seen_at: float | None = None   # when the freshest step reached max_steps

    @property
    def saving(self) -> bool:
        """The savers save on request: nothing is stopped meanwhile."""
        return self.request is not None and not self._request_over

    def seen_by(self, view: TrainingView) -> TrainingView:
        """The end rules' view once the request's wait is over: the savers that saved are
        on their way out; without its checkpoint, the trainers' own save is waited for."""
        request = self.request
        if request is None or not self._request_over:
            return view
        saving = request.notified if self.plan.synchronous else \
            tuple(request.answered)     # MWMS: PreemptionCheckpointHandler exits
        return replace(view, unsaved=True) if not request.saved_it else \
            replace(view, saving=saving)

    def records(self) -> tuple[dict | None, dict | None]:
        """The preemption notice and the save request as JobResult records them."""
        return (self.notice.to_dict() if self.notice is not None else None,
                self.request.to_dict() if self.request is not None else None)

    # ------------------------------------------------------------ the save request
    def save_at_max_steps(self, training_done: bool) -> None:
        """The end uses the notice: once the freshest step (the trainers' output, the
        events file, a checkpoint) reached max_steps and no complete checkpoint covers it,
        the savers get the same save request as a preemption notice, while every ps
        serves; the end rules wait for its checkpoint (docs/ending.md). A saver that cannot
        save on request is said at once; its script's own save or end is waited for,
        within timeouts.save. ``training_done``: training was seen done."""
        if self.request is None:
            self._request_if_due(training_done)
        request = self.request
        if request is None or self._request_over:
            return
        outcome = self._turn(request, self._requested_to)
        if not outcome:
            return
        self._request_over = True
        max_steps = self.plan.max_steps
        if request.saved_it:
            then = ", then the ps" if any(t.type == "ps" for t in self.plan.tasks) else ""
            self.console.info(f"{AT_MAX_STEPS}: {outcome} (max_steps {max_steps}); ending "
                              f"the job: the trainers{then}")
        elif any(r.running for r in self._requested_to):
            self.console.info(f"{AT_MAX_STEPS}: {outcome}: it cannot save on request; "
                              f"waiting for its own save or end (at most timeouts.save "
                              f"{self.plan.timeouts.save:g}s from training's "
                              f"end)")
        else:
            self.console.info(f"{AT_MAX_STEPS}: {outcome}")
        self.events.write("save_request_over", outcome=outcome, saved=request.saved_it)

    def _request_if_due(self, training_done: bool) -> None:
        """Send the save request at max_steps when it is due (launcher/ending.py
        ``save_due``). model_dir's view is read only once training was seen done, or the
        trainers' output showed max_steps: before that nothing is due."""
        max_steps = self.plan.max_steps
        if max_steps is None or not self.plan.timeouts.preempt or self._request_over:
            return
        shown = self.console.steps.newest()
        if not training_done and (shown is None or shown.step < max_steps):
            return
        tasks = self.snapshot()
        if not savers(tasks, self.plan.synchronous) or self.tasks.primary.status is not None:
            self._request_over = True       # the script ended training itself
            return
        view = self.view(tasks)
        if view.final_step is not None and view.final_step >= max_steps:
            self._request_over = True       # a checkpoint covers max_steps: none is due
            return
        step, source = self._freshest(view)
        now = self.tasks.clock()
        if step is not None and step >= max_steps and self._max_seen_at is None:
            self._max_seen_at = now
        since = None if self._max_seen_at is None else now - self._max_seen_at
        if save_due(view, step, sum(1 for t in tasks if t.type in TRAINERS), since):
            self._send_request(tasks, view, step, source)

    def _freshest(self, view: TrainingView) -> tuple[int | None, str]:
        """The newest step known and where it was seen: the trainers' output, or model_dir
        (the events file, a checkpoint)."""
        shown = self.console.steps.newest()
        if shown is not None and (view.latest_step is None or shown.step > view.latest_step):
            return shown.step, f"{shown.task}'s output"
        return view.latest_step, "model_dir"

    def _send_request(self, tasks: list[TaskState], view: TrainingView, step: int | None,
                      source: str) -> None:
        """The save request at max_steps, said in one line; training is done from now."""
        max_steps = self.plan.max_steps
        request, self._requested_to = self._notify(tasks, AT_MAX_STEPS, max_steps,
                                                   view.final_step)
        request.seen, request.source = step, source
        self.training_done()
        how = ": SIGTERM to every trainer, for PreemptionCheckpointHandler" \
            if self.plan.synchronous else ", every ps serving"
        covers = f"the newest complete checkpoint is at step {view.final_step}" \
            if view.final_step is not None else "no complete checkpoint yet"
        self.console.info(f"{AT_MAX_STEPS}: step {step} ({source}) reached max_steps "
                          f"{max_steps} and {covers}: "
                          f"{names_text(list(request.notified))} to save a checkpoint now "
                          f"(at most {request.bound:g}s, timeouts.preempt){how}")

    def handler_exit(self, run: TaskRun) -> bool:
        """A MultiWorkerMirrored trainer sent the save request (SIGTERM) that exits with
        PreemptionCheckpointHandler's status (it exits so only after its save): stopped on
        request."""
        request = self.request
        if not (self.plan.synchronous and request is not None and
                run.name in request.notified and run.status == HANDLER_EXIT):
            return False
        run.stopped = True
        return True

    # ------------------------------------------------------------ a preemption
    def preempt(self, tick: Callable[[], None]) -> str:
        """Send the notice to the savers, then ``tick`` the monitors (model_dir's view)
        until its checkpoint is complete or the wait is otherwise over; exits are not
        judged and nothing restarts meanwhile. Returns why the wait ended."""
        self.tasks.cancel_starts()
        tasks = self.snapshot()
        view = self.view(tasks)
        notice, notified = self._notify(tasks, PREEMPTION, view.latest_step, view.final_step)
        self.console.info(f"{PREEMPTION}: {names_text(list(notice.notified)) or 'no task'}"
                          f" to save a checkpoint at the current step (at most "
                          f"{notice.bound:g}s, timeouts.preempt), every ps serving")
        while True:
            self.tasks.take_ended()
            tick()
            outcome = self._turn(notice, notified)
            if outcome:
                self.console.info(f"{PREEMPTION}: {outcome}; stopping the tasks, the ps last")
                return outcome
            self.tasks.wait(TURN)

    # ------------------------------------------------------------ either
    def _notify(self, tasks: list[TaskState], kind: str, step: int | None,
                saved: int | None) -> tuple[Notice, list[TaskRun]]:
        """The notice (a preemption, or the save request at max_steps) for the savers:
        recorded, sent by the first turn of its wait (``_turn``)."""
        sends = self.sends
        notified = [r for r in self.tasks.runs if r.name in savers(tasks, self.plan.synchronous)]
        notice = Notice(self.tasks.clock(), self.plan.timeouts.preempt,
                        tuple(r.name for r in notified), step, saved, kind=kind, sends=sends)
        if kind == PREEMPTION:
            self.notice = notice
        else:
            self.request = notice
        self.events.write("preemption_notice" if kind == PREEMPTION else "save_request",
                          tasks=list(notice.notified), signal=signal.Signals(sends).name,
                          step=notice.step, checkpoint=notice.saved)
        for run in notified:
            run.stopped = run.stopped or sends == signal.SIGTERM
        return notice, notified

    def _turn(self, notice: Notice, notified: list[TaskRun]) -> str:
        """One turn of a notice's wait: sent (again every RESEND s until answered, where it
        may come before the task armed its handler), the answers read, and why the wait is
        over (launcher/ending.py ``over``; "" while it goes on)."""
        now = self.tasks.clock()
        if now - notice.sent >= RESEND and (notice.sent < 0 or notice.sends == NOTICE):
            notice.sent = now
            for run in notified:    # each that runs and has not answered yet
                if run.handle is not None and run.running and run.name not in notice.answered:
                    run.handle.signal(notice.sends)
        tasks = self.snapshot()
        notice.answered.update(answers(notified, notice.answered))
        notice.outcome = over(notice, self.tasks.clock(), tasks, self.view(tasks),
                              notice.answered) or ""
        return notice.outcome
