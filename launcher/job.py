"""The job loop: start the tasks, decide the end, stop everything.

Policy lives here; the task mechanics (start, output, exits, SIGTERM then SIGKILL) in
launcher/tasks.py, the engines' in the backends. The end of a job:
- training is done when the primary task (chief, else master, else worker 0) exits 0, or
  when a monitor (the coordinator) says max_steps is reached; from then on the end rules
  (launcher/ending.py) say who is stopped when: trainers that go on past max_steps or add
  nothing (asynchronous workers after the chief), then every ps, then the evaluator once it
  evaluated the final checkpoint (or ``timeouts.evaluator`` ran out); SIGTERM, then SIGKILL
  after ``timeouts.kill``. The job succeeds when every task ended;
- an evaluator that fails after training finished fails the job (exit status 1) with a
  reason that says so: "training finished ..., but the evaluator failed: ..."
  (docs/ending.md);
- a task that ends before that, or that a monitor reports ``lost``, is judged by
  launcher/restarts.py (the restart policies, the one judge of a lost task): it is
  restarted alone, or the whole cluster is (a lost ps), or the job goes on without it (a
  worker within ``roles.worker.minimum``: launcher/elastic.py, which also starts it again
  once its host returns), or the job fails;
- failure when a task exits with an error (or a monitor says the job stalled): every task is
  stopped and the failing task's last lines are shown;
- Ctrl-C or SIGTERM to the launcher (``launch cancel``, Slurm's warning signal) stops every
  task, as does the whole-job deadline ``timeouts.job``: trainers and the evaluator first,
  the ps once they are gone (``teardown``).

Readiness: with ``readiness`` (the liveness monitor, launcher/monitors/liveness.py), a ps
that has not answered TensorFlow's gRPC ``timeouts.start`` seconds after its (re)start fails the job
(exit 1), naming it. Every task starts at once: holding the trainers until the ps answer
did not shorten the time to the first step (docs/benchmarks.md, "Readiness gate"). A task a
monitor reports ``lost`` gets SIGKILL at once (a frozen process does not act on SIGTERM)
before its restart policy is applied.

The monitors are the caller's (launcher/api.py builds them: ``watch``, called once every
task started, or ``WATCH_WITHIN`` seconds into slow starts). Monitors see a snapshot of the
tasks (``Job.snapshot()``, orchestrator.decisions.TaskState: the one snapshot type, which
the end rules and every table read too), never the Job, and answer in the one decision
vocabulary (orchestrator.decisions.Decision). Time comes from an injected clock and the
loop waits through an injected ``wait``, so the rules are tested against a scripted
in-memory backend in milliseconds (tests/support.py).
"""

from __future__ import annotations

import os
import signal
import threading
import time
from collections import Counter
from dataclasses import replace
from typing import TYPE_CHECKING, Callable

from launcher.backends.base import Backend
from launcher.ending import (
    AT_MAX_STEPS,
    PREEMPTION,
    RESEND,
    SAVE_BOUND,
    JobResult,
    Notice,
    TrainingView,
    end_step,
    over,
    own_evaluations,
    save_due,
    savers,
)
from launcher.errors import UsageError
from launcher.monitors import TURN, tick_every
from launcher.output.console import Console
from launcher.output.known_failures import diagnose, lines_of
from launcher.output.tracebacks import Excerpt, describe, tail_box
from launcher.plan import JobPlan, TaskPlan
from launcher.records.crash import crash_line, save_traceback
from launcher.records.events import EventLog
from launcher.records.unwritten import Unwritten
from launcher.restarts import RestartBook
from launcher.signals import PREEMPTED, catch, restore
from launcher.tasks import TaskRun, Tasks
from orchestrator.decisions import CLUSTER, DROP, FAIL, FINISH, IGNORE, LOST, Decision, TaskState
from orchestrator.elastic import PROBE_TIMEOUT, HostWatch, Lost, fewer_words, lost_line, lost_of
from orchestrator.preemption import ANSWER, NOTICE
from orchestrator.roles import TRAINERS, names_text, role_counts

if TYPE_CHECKING:
    from launcher.monitors import Monitor, Readiness, Watch

HANDLER_EXIT = 42      # PreemptionCheckpointHandler's exit after its save (TensorFlow's default)
WATCH_WITHIN = 2.0     # s: the monitors wait for the tasks' starts at most this long
PORT_IN_USE = ("Address already in use", "Failed to add port", "bind: address")
# TensorFlow's words when the script's own model_dir is not the one in TF_CONFIG.
MODEL_DIR_MISMATCH = ("must have the same value as the model_dir in TF_CONFIG",
                      "are set both in constructor and `RunConfig`, but with different")


class PortConflict(Exception):
    """A task could not bind the port the launcher picked for it (a race with another
    process): the caller re-plans with new ports and starts again."""


class StartFailed(UsageError):
    """A task's command was refused at the job's first start (the kernel, the remote shell
    or the engine would not run it): one line, exit status 2, every task stopped."""


def answers(notified: list[TaskRun], answered: dict[str, str]) -> dict[str, str]:
    """The notified tasks' first answer lines to the notice (ANSWER), beyond ``answered``."""
    found = {}
    for run in notified:
        if run.name not in answered:
            line = next((line for line in run.tail if ANSWER in line), None)
            if line is not None:
                found[run.name] = line
    return found


class Job:
    """One run of a plan on a backend: the loop's policy over the task mechanics."""

    def __init__(self, plan: JobPlan, backend: Backend, run_dir: str, console: Console,
                 monitors: list[Monitor] | None = None, events: EventLog | None = None,
                 clock: Callable[[], float] = time.monotonic,
                 wait: Callable[[float], object] | None = None,
                 readiness: Readiness | None = None,
                 training: Callable[[], TrainingView] | None = None,
                 watch: Callable[[], Watch] | None = None,
                 unwritten: Unwritten | None = None,
                 cancelled: Callable[[], bool] = lambda: False):
        self.plan = plan
        self.backend = backend
        self.run_dir = run_dir
        self.console = console
        self.timeouts = plan.timeouts
        self.clock = clock
        self.unwritten = unwritten or Unwritten(console.info)
        self.events = events or EventLog(os.path.join(run_dir, "events.jsonl"),
                                         on_error=self._events_unwritten)
        self.tasks = Tasks(plan.tasks, backend, run_dir, console, self.events, clock, wait,
                           kill_timeout=plan.timeouts.get("kill", 5.0),
                           unwritten=self.unwritten)
        self.wait = self.tasks.wait
        self.monitors: list[Monitor] = list(monitors or [])
        # ``watch`` (the caller's monitors, launcher/api.py) is called once every task
        # started, at most WATCH_WITHIN s in: model_dir is not read while they start.
        self.watch = watch
        self.interrupted: int | None = None
        self.started = clock()
        self.training_done_at: float | None = None   # when the chief or a monitor said so
        self.training = training      # what model_dir says (the coordinator's view)
        self.reached_at: float | None = None   # when a monitor said max_steps was reached
        self._ticked = -float("inf")         # when the monitors last ticked
        self.trainers_done_at: float | None = None   # after training: no trainer left
        self.waiting: tuple[float, str] | None = None  # trainers at work past finish: since, who
        self.waited: list[str] = []       # closing lines: whom the end waited for, how long
        self.cut_short: list[str] = []    # what the end stopped in the middle of its work
        self.incidents: list[dict] = []   # one per restart decision, with its tasks
        self.restarts = RestartBook(dict(plan.restart), synchronous=plan.synchronous,
                                    minimum=dict(plan.minimum),
                                    counts=dict(Counter(t.type for t in plan.tasks)),
                                    primary=self.tasks.primary.name)
        self.lost: list[Lost] = []      # workers the job goes on without (elastic)
        self.hosts: HostWatch[TaskPlan] = HostWatch(self._answers, clock, console.info)
        self.due: dict[str, float] = {}     # task name -> when its restart is due
        self.readiness = readiness
        self.tick_every = tick_every(len(plan.tasks))   # monitors: longer with many tasks
        self.notice: Notice | None = None     # a preemption notice (launcher/ending.py)
        self.request: Notice | None = None    # the save request at max_steps (the same)
        self._requested_to: list[TaskRun] = []   # ... and the savers it went to
        self._request_over = False      # ... its wait is over
        self._max_seen_at: float | None = None   # when the freshest step reached max_steps
        self.cancelled = cancelled      # the SIGTERM came from `launch cancel`

    def _events_unwritten(self, error: OSError) -> None:
        self.unwritten.failed("events.jsonl", error)

    # ------------------------------------------------------------------ queries
    def snapshot(self) -> list[TaskState]:
        """Every task now, as monitors, the end rules and the run registry see it. A task
        the job loop is about to restart is alive: its restart policy already acted."""
        return self.tasks.snapshot(restarting=self.due)

    # ------------------------------------------------------------------ the loop
    def run(self) -> JobResult:
        """Run the job to its end. The loop's own failure (a bug, a backend or monitor that
        raises) is not a traceback: the tasks are stopped in order, the traceback is saved
        to run_dir/launcher-error.txt and the result says in one line that it is the
        launcher's fault."""
        previous = self._install_signal_handlers()
        try:
            return self._run()
        except (PortConflict, UsageError):
            raise       # the caller's to handle: new ports, or bad input (exit 2)
        except Exception as e:      # noqa: BLE001 - the launcher's own failure
            return self._crashed(e)
        finally:
            self._stop_all("teardown")
            self.tasks.join_output(timeout=5)
            for monitor in self.monitors:
                try:
                    monitor.close()
                except Exception:   # noqa: BLE001 - closing must not hide the result
                    pass
            restore(previous)

    def _crashed(self, error: Exception) -> JobResult:
        reason = crash_line(error, save_traceback(error, self.run_dir))
        self.console.info(reason)
        self._stop_all(reason)
        return self._result(1, reason)

    def _stop_all(self, reason: str) -> None:
        """``teardown``; when that fails too (a backend that raises), each task is killed
        as far as its handle allows."""
        try:
            self.teardown(reason)
            return
        except Exception:   # noqa: BLE001 - the tasks must end whatever broke
            pass
        for run in self.tasks.runs:
            try:
                if run.handle is not None and run.handle.poll() is None:
                    run.handle.kill()
            except Exception:   # noqa: BLE001
                pass

    def _run(self) -> JobResult:
        self.events.write("job_started", run_id=self.plan.run_id, tasks=len(self.tasks.runs))
        self.tasks.start_all(self.tasks.runs, stop=lambda: bool(self.interrupted),
                             after=self._refused_at_start)
        announced = False
        self._ticked = -float("inf")
        while True:
            self.tasks.check_starts()
            if self.watch is not None and (not self.tasks.starting or
                                           self.clock() - self.started >= WATCH_WITHIN):
                self._watch()
            if not announced and not self.tasks.starting:
                announced = True
                self._announce()
            if self.interrupted:
                return self._interrupted()
            result = self._judge_exits() or self._tick_monitors()
            if result is None:
                self._save_at_max_steps()
                result = self._judge_turn()
            if result is not None:
                return result
            self._start_due()
            # a turn is O(N) (every task polled): with many tasks the loop turns as often
            # as the monitors tick, leaving the starts the CPU; an exit that closes a
            # task's output wakes it at once either way
            self.wait(self.tick_every)

    def _watch(self) -> None:
        """The caller's monitors, built once every task started (or ``WATCH_WITHIN``
        seconds into slow starts): their modules load and model_dir is read while the
        tasks boot, not while they are being started."""
        assert self.watch is not None
        watch, self.watch = self.watch(), None
        self.monitors += watch.monitors
        self.readiness = self.readiness or watch.readiness
        self.training = self.training or watch.training

    def _save_at_max_steps(self) -> None:
        """The end uses the notice: once the freshest step (the trainers' output, the
        events file, a checkpoint) reached max_steps and no complete checkpoint covers it,
        the savers get the same save request as a preemption notice, while every ps
        serves; the end rules wait for its checkpoint (docs/ending.md). A saver that cannot
        save on request is said at once; its script's own save or end is waited for,
        within timeouts.save."""
        if self.request is None:
            self._request_if_due()
        request = self.request
        if request is None or self._request_over:
            return
        outcome = self._notice_turn(request, self._requested_to)
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
                              f"{self.timeouts.get('save', SAVE_BOUND):g}s from training's "
                              f"end)")
        else:
            self.console.info(f"{AT_MAX_STEPS}: {outcome}")
        self.events.write("save_request_over", outcome=outcome, saved=request.saved_it)

    def _request_if_due(self) -> None:
        """Send the save request at max_steps when it is due (launcher/ending.py
        ``save_due``). model_dir's view is read only once training was seen done, or the
        trainers' output showed max_steps: before that nothing is due."""
        max_steps = self.plan.max_steps
        if max_steps is None or not self.timeouts.get("preempt") or self._request_over:
            return
        shown = self.console.steps.newest()
        if self.training_done_at is None and (shown is None or shown.step < max_steps):
            return
        tasks = self.snapshot()
        if not savers(tasks, self.plan.synchronous) or self.tasks.primary.status is not None:
            self._request_over = True       # the script ended training itself
            return
        view = self._training(tasks)
        if view.final_step is not None and view.final_step >= max_steps:
            self._request_over = True       # a checkpoint covers max_steps: none is due
            return
        step, source = self._freshest(view)
        now = self.clock()
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
        now = self.clock()
        self.training_done_at = self.training_done_at or now
        self.reached_at = self.reached_at or now
        how = ": SIGTERM to every trainer, for PreemptionCheckpointHandler" \
            if self.plan.synchronous else ", every ps serving"
        covers = f"the newest complete checkpoint is at step {view.final_step}" \
            if view.final_step is not None else "no complete checkpoint yet"
        self.console.info(f"{AT_MAX_STEPS}: step {step} ({source}) reached max_steps "
                          f"{max_steps} and {covers}: "
                          f"{names_text(list(request.notified))} to save a checkpoint now "
                          f"(at most {request.bound:g}s, timeouts.preempt){how}")

    def _judge_exits(self) -> JobResult | None:
        """The tasks that ended since the last turn, each through its restart policy; the
        job's failure when one says so."""
        for run in self.tasks.take_ended():
            if run.name in self.due:
                continue        # a restart decided in this turn covers its exit
            failure = self._judge_exit(run, self.training_done_at is not None)
            if failure and run.task.type == "evaluator" and self.training_done_at:
                failure = f"training finished, but the evaluator failed: {failure}"
            if failure:
                return self._fail(run, failure)
        return None

    def _tick_monitors(self) -> JobResult | None:
        """When it is time: one snapshot for every monitor, each decision acted on."""
        if not self.monitors or (self.tick_every > TURN and
                                 self.clock() - self._ticked < self.tick_every):
            return None
        tasks = self.snapshot()
        self._ticked = self.clock()
        for monitor in self.monitors:
            decision = monitor.tick(tasks)
            result = self._act_on(decision) if decision is not None else None
            if result is not None:
                return result
        return None

    def _act_on(self, decision: Decision) -> JobResult | None:
        """A monitor's decision: fail the job, judge a loss, or note training done."""
        if decision.action == FAIL:
            return self._finish(1, decision.reason)
        if decision.action == LOST:
            failure = self._judge_lost(decision)
            if failure:
                return self._finish(1, failure)
        if decision.action == FINISH and self.reached_at is None:
            self.reached_at = self.clock()
        if decision.action == FINISH and self.training_done_at is None:
            self.console.info(decision.reason)
            self.training_done_at = self.clock()
        return None

    def _judge_turn(self) -> JobResult | None:
        """The primary's exit 0 marks training done; a job whose tasks all ended well
        succeeds; a silent ps fails it."""
        primary = self.tasks.primary
        if self.training_done_at is None and primary.status == 0:
            self.training_done_at = self.clock()
            others = [r.name for r in self.tasks.live()]
            self.console.info(f"{primary.name} finished" + (
                f"; waiting for {names_text(others)} to end" if others else ""))
        if self.training_done_at is not None and self._ended_well():
            fewer = fewer_words(self.lost)
            return self._finish(0, f"training finished with {fewer} and every other "
                                   f"task ended" if fewer else
                                "training finished and every task ended")
        failure = self._silent_ps()
        return self._finish(1, failure) if failure else None

    def _interrupted(self) -> JobResult:
        """Ctrl-C, SIGHUP: the ordered stop. SIGTERM while training runs is a preemption
        notice (launcher/ending.py): the savers save first, within timeouts.preempt."""
        name = signal.Signals(self.interrupted or signal.SIGTERM).name
        if self.interrupted != signal.SIGTERM or not self.timeouts.get("preempt") or \
                self.training_done_at is not None:
            return self._finish(128 + (self.interrupted or 0), f"interrupted by {name}")
        outcome = self._preempt()
        if self.cancelled():
            return self._finish(128 + signal.SIGTERM, f"interrupted by {name}")
        return self._finish(PREEMPTED, f"preempted by {name}; {outcome}")

    def _preempt(self) -> str:
        """Send the notice to the savers, then tick the monitors (model_dir's view) until
        its checkpoint is complete or the wait is otherwise over; exits are not judged and
        nothing restarts meanwhile. Returns why the wait ended."""
        self.tasks.cancel_starts()
        tasks = self.snapshot()
        view = self._training(tasks)
        notice, notified = self._notify(tasks, PREEMPTION, view.latest_step, view.final_step)
        self.console.info(f"{PREEMPTION}: {names_text(list(notice.notified)) or 'no task'}"
                          f" to save a checkpoint at the current step (at most "
                          f"{notice.bound:g}s, timeouts.preempt), every ps serving")
        return self._wait_for_the_save(notice, notified)

    def _notify(self, tasks: list[TaskState], kind: str, step: int | None,
                saved: int | None) -> tuple[Notice, list[TaskRun]]:
        """The notice (a preemption, or the save request at max_steps) for the savers:
        recorded, sent by the first turn of its wait (``_notice_turn``)."""
        synchronous = self.plan.synchronous
        sends = signal.SIGTERM if synchronous else self.backend.notice.sends
        notified = [r for r in self.tasks.runs if r.name in savers(tasks, synchronous)]
        notice = Notice(self.clock(), self.timeouts["preempt"], tuple(r.name for r in notified),
                        step, saved, kind=kind, sends=sends)
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

    def _wait_for_the_save(self, notice: Notice, notified: list[TaskRun]) -> str:
        """A preemption's wait: the monitors ticked, the notice's turns taken, until the
        wait is over; returns why it ended."""
        ticked = -float("inf")
        while True:
            self.tasks.take_ended()
            if self.clock() - ticked >= self.tick_every:
                ticked = self.clock()
                tasks = self.snapshot()
                for monitor in self.monitors:
                    monitor.tick(tasks)
            outcome = self._notice_turn(notice, notified)
            if outcome:
                self.console.info(f"{PREEMPTION}: {outcome}; stopping the tasks, the ps last")
                return outcome
            self.wait(TURN)

    def _notice_turn(self, notice: Notice, notified: list[TaskRun]) -> str:
        """One turn of a notice's wait: sent (again every RESEND s until answered, where it
        may come before the task armed its handler), the answers read, and why the wait is
        over (launcher/ending.py ``over``; "" while it goes on)."""
        if self.clock() - notice.sent >= RESEND and \
                (notice.sent < 0 or notice.sends == NOTICE):
            notice.sent = self.clock()
            self._send_notice(notified, notice.answered, notice.sends)
        tasks = self.snapshot()
        notice.answered.update(answers(notified, notice.answered))
        notice.outcome = over(notice, self.clock(), tasks, self._training(tasks),
                              notice.answered) or ""
        return notice.outcome

    @staticmethod
    def _send_notice(notified: list[TaskRun], answered: dict[str, str], sends: int) -> None:
        """The notice to each notified task that runs and has not answered yet."""
        for run in notified:
            if run.handle is not None and run.running and run.name not in answered:
                run.handle.signal(sends)

    def _handler_exit(self, run: TaskRun) -> bool:
        """A MultiWorkerMirrored trainer sent the save request (SIGTERM) that exits with
        PreemptionCheckpointHandler's status (it exits so only after its save): stopped on
        request."""
        request = self.request
        if not (self.plan.synchronous and request is not None and
                run.name in request.notified and run.status == HANDLER_EXIT):
            return False
        run.stopped = True
        return True

    @staticmethod
    def _refused_at_start(run: TaskRun) -> None:
        """After each first start: a command refused (not found, not runnable) ends the
        job at once, one line, exit status 2."""
        if run.handle is not None and run.handle.start_failure:
            raise StartFailed(run.handle.start_failure)

    def _announce(self) -> None:
        """One line once every task started: how many of each role, and how long it took."""
        runs = [r for r in self.tasks.runs if r.handle is not None]
        of = "" if len(runs) == len(self.tasks.runs) else f" of {len(self.tasks.runs)}"
        took = self.clock() - self.started
        self.console.info(f"started {len(runs)}{of} tasks ({role_counts([r.name for r in runs])})"
                          f" in {took:.1f}s; logs in {self.run_dir}/logs")

    def _judge_exit(self, run: TaskRun, finishing: bool) -> str | None:
        """Why this exit fails the job, or None when it is fine (or restarts it)."""
        if run.stopped or run.status is None or self._handler_exit(run):
            self._fold(run)
            return None
        if run.status != 0:
            self.tasks.join_output(run)     # its last lines tell an error from a kill
        refused = run.handle.start_failure if run.handle is not None else None
        if refused:     # its command never ran (the output told why)
            if not run.restarts:
                raise StartFailed(refused)
            return self._apply(self.restarts.judge_refused(run.task.type, run.name, refused),
                               run)
        if run.status != 0 and run.task.auto_port and \
                any(m in line for line in run.tail for m in PORT_IN_USE):
            raise PortConflict(f"{run.name} could not bind port {run.task.port}")
        tail = list(run.tail)
        if run.status != 0:     # the exception may be far above the last lines
            excerpt = describe(run.log_path)
            if excerpt is not None:
                tail += excerpt.chain or (excerpt.exception,)
        verdict = self.restarts.judge_exit(run.task.type, run.name, run.status, tail,
                                           finishing)
        return self._apply(verdict, run)

    def _judge_lost(self, decision: Decision) -> str | None:
        """A monitor's ``lost``: restart the task it names when its policy says so."""
        run = self.tasks.named(decision.task) if decision.task else None
        if run is None:
            return decision.reason
        if run.name in self.due:
            return None     # already being restarted
        self.tasks.stop([run], decision.reason, kill=True)    # lost: it may be frozen
        verdict = self.restarts.judge_lost(run.task.type, run.name, decision.reason)
        return self._apply(verdict, run)

    def _silent_ps(self) -> str | None:
        """Why the job fails when a ps has not answered TensorFlow's gRPC within
        ``timeouts.start`` of its start (the trainers cannot train without it)."""
        if self.readiness is None or self.training_done_at is not None:
            return None
        for run in self.tasks.runs:
            if run.task.type == "ps" and run.running and not run.stopped and \
                    run.started is not None and \
                    self.clock() - run.started >= self.timeouts["start"] and \
                    not self.readiness.answered(run.name, run.started):
                return self.readiness.not_ready_reason(run.name, run.task.address)
        return None

    def _apply(self, verdict: Decision, run: TaskRun) -> str | None:
        """Carry out a restart decision; return the reason when the job must fail."""
        if verdict.action == FAIL:
            self.console.release(run.name)     # as it came: the failure tail follows
            return verdict.reason
        if verdict.action == IGNORE:
            self._fold(run, verdict.reason)
            return None
        if verdict.action == DROP:
            self._drop(run, verdict)
            self._fold(run)
            return None
        self.console.info(verdict.reason)
        self._fold(run)
        self.events.write("restart_scheduled", task=run.name, scope=verdict.scope,
                          attempt=verdict.attempt, delay=verdict.delay, reason=verdict.reason)
        members = [run]
        if verdict.scope == CLUSTER:
            self.tasks.cancel_starts()      # those not started yet start with the others
            members = [r for r in self.tasks.runs if r.task.type != "evaluator" and
                       r.name not in self.restarts.dropped]
            self.tasks.stop([r for r in members if r.running],
                            f"restarting the cluster: {run.name}", restart=True)
            for member in members:
                self._fold(member)
        for member in members:      # the back-off counts from when they are all down
            self.due[member.name] = self.clock() + verdict.delay
        self.incidents.append({"cause": run.name, "reason": verdict.reason,
                               "scope": verdict.scope, "tasks": [m.name for m in members],
                               "at": round(self.clock() - self.started, 3)})
        return None

    def _drop(self, run: TaskRun, verdict: Decision) -> None:
        """Go on without a worker that cannot come back; its host is watched for its
        return."""
        lost = lost_of(run.task, verdict.reason, self.clock() - self.started)
        self.lost.append(lost)
        self.console.info(lost_line(lost))
        self.events.write("task_lost_for_good", task=run.name, reason=verdict.reason,
                          shard=lost.shard)
        self.hosts.watch(run.task)

    def _answers(self, task: TaskPlan) -> bool:
        """Whether ``task``'s host runs a command (off the loop's thread: HostWatch)."""
        return self.backend.probe(task, ["true"], PROBE_TIMEOUT).returncode == 0

    def _start_returned(self) -> None:
        """Start again the lost workers whose host answers again (not after training)."""
        for name in self.hosts.returned():
            run = self.tasks.named(name)
            if run is None or self.training_done_at is not None or self.interrupted:
                continue
            self.restarts.back(name)
            for lost in self.lost:
                if lost.task == name and lost.returned_at is None:
                    lost.returned_at = self.clock() - self.started
            self.console.info(f"{name}'s host {run.task.host} answers again: starting "
                              f"{name} again")
            self.events.write("task_returned", task=name)
            run.restarts += 1
            self.tasks.start(run)

    def _fold(self, run: TaskRun, why: str | None = None) -> None:
        """A traceback of a task whose end the launcher handled (restarted, tolerated,
        stopped) is folded into its exception and where its traceback is, after ``why``
        when no line said it yet; one that exited 0 printed its own traceback on purpose,
        shown as it came (launcher/output/console.py holds it until now)."""
        if not self.console.holds(run.name):
            return
        if run.status == 0 and not run.stopped:
            self.console.release(run.name)
            return
        excerpt = describe(run.log_path)
        lines = [why] if why else []
        lines += excerpt_lines(run.name, run.log_path, excerpt, folded=True)[:2] \
            if excerpt is not None else [f"{run.name}: its traceback is in {run.log_path}"]
        self.console.release(run.name, lines)

    def _start_due(self) -> None:
        """Start again, in plan order, the tasks whose restart is due."""
        self._start_returned()
        now = self.clock()
        if self.training_done_at is not None:   # trainers lost after the end stay down
            self.due = {n: t for n, t in self.due.items() if n.startswith("evaluator")}
        if not any(t <= now for t in self.due.values()):
            return
        for run in self.tasks.runs:
            if run.name in self.due and self.due[run.name] <= now and not self.interrupted:
                del self.due[run.name]
                run.restarts += 1
                self.tasks.start(run)

    def _training(self, tasks: list[TaskState]) -> TrainingView:
        """What model_dir says (the coordinator's view), as the end rules read it;
        ``tasks``: this turn's snapshot."""
        view = self.training() if self.training is not None else \
            TrainingView(max_steps=self.plan.max_steps)
        view = own_evaluations(view, tasks)
        if self.request is not None and self._request_over:
            saving = self.request.notified if self.plan.synchronous else \
                tuple(self.request.answered)    # MWMS: PreemptionCheckpointHandler exits
            view = replace(view, unsaved=True) if not self.request.saved_it else \
                replace(view, saving=saving)
        if self.reached_at is not None:
            view = replace(view, reached_at=self.reached_at)
        return view

    def _ended_well(self) -> bool:
        """After training: apply the end rules (launcher/ending.py) once per turn; True
        when every task ended."""
        now = self.clock()
        tasks = self.snapshot()
        if self.request is not None and not self._request_over:
            return False        # the savers save on request: nothing is stopped meanwhile
        if self.trainers_done_at is None and not any(
                t.type in TRAINERS and (t.running or t.restarting) for t in tasks):
            self.trainers_done_at = now
        step = end_step(now, tasks, self._training(tasks), self.timeouts, self.plan.synchronous,
                        self.trainers_done_at, self.training_done_at,
                        estimator=self.plan.strategy == "estimator")
        self._waited(step.wait, now)
        if step.cut:
            self.cut_short.append(step.cut)
        if step.stop:
            self.console.info(f"stopping {names_text(step.stop)}: {step.reason}")
            self.tasks.stop([r for r in self.tasks.runs if r.name in step.stop], step.reason)
            return False
        return step.done

    def _waited(self, wait: str, now: float) -> None:
        """Trainers still at work past ``timeouts.finish`` (``wait``: who, doing what): said
        once when the wait begins; the closing lines say how long it lasted and its bound."""
        bound = f"at most timeouts.save {self.timeouts.get('save', SAVE_BOUND):g}s from " \
                "training's end"
        if wait and self.waiting is None:
            self.waiting = (now, wait)
            self.console.info(f"waiting for {wait} ({bound})")
        elif not wait and self.waiting is not None:
            since, who = self.waiting
            self.waiting = None
            self.waited.append(f"waited {now - since:.0f}s past timeouts.finish for {who} "
                               f"({bound})")

    def _fail(self, run: TaskRun, reason: str) -> JobResult:
        self.console.info(reason)
        self.tasks.join_output(run)
        excerpt = describe(run.log_path)
        if excerpt is not None:
            for line in excerpt_lines(run.name, run.log_path, excerpt):
                self.console.info(line)
        known = diagnose(run.log_path, run.status,
                         run.handle.pid if run.handle is not None else None)
        for line in lines_of(known) if known is not None else ():
            self.console.info(line)
        if run.tail:
            self.console.info(f"last lines of {run.name} ({run.log_path}):")
            for line in tail_box(run.tail, excerpt):
                self.console.info(f"  | {line}")
        return self._finish(1, reason)

    def teardown(self, reason: str) -> None:
        """Stop every live task in order: the trainers and the evaluator first, the ps once
        they are gone (a ps stopped first leaves trainers hanging, or a checkpoint being
        written half done). Ctrl-C, SIGTERM (``launch cancel``, Slurm's warning signal),
        ``timeouts.job`` and failures all end this way; starts not begun are dropped."""
        self.tasks.cancel_starts()
        self.tasks.stop([r for r in self.tasks.live() if r.task.type != "ps"], reason)
        self.tasks.stop(self.tasks.live(), reason)

    def _finish(self, status: int, reason: str) -> JobResult:
        self.teardown(reason)
        return self._result(status, reason)

    def _result(self, status: int, reason: str) -> JobResult:
        self._waited("", self.clock())
        result = JobResult(status, reason, self.snapshot(), self.clock() - self.started,
                           self.training_done_at is not None, list(self.incidents),
                           self.unwritten.lines(), [lost.to_dict() for lost in self.lost],
                           waited=list(self.waited), cut_short=list(self.cut_short),
                           preemption=self.notice.to_dict() if self.notice is not None
                           else None,
                           save_request=self.request.to_dict() if self.request is not None
                           else None)
        self.events.write("job_ended", status=status, reason=reason,
                          duration=round(result.duration, 3))
        return result

    # ------------------------------------------------------------------ signals
    def _install_signal_handlers(self) -> dict:
        if threading.current_thread() is not threading.main_thread():
            return {}

        def handler(signum, _frame):
            if self.interrupted:
                return
            self.interrupted = signum

        return catch(handler)


FOLDED_EXCEPTION = 240      # characters of a folded exception line


def excerpt_lines(name: str, log_path: str, excerpt: Excerpt, folded: bool = False
                  ) -> list[str]:
    """The exception of a failed task, where its traceback starts, and a hint for the
    errors the launcher can explain. ``folded``: a failure the launcher handled, whose
    traceback the console did not print (the exception line cut to FOLDED_EXCEPTION)."""
    where = f"traceback from line {excerpt.traceback_line} of {log_path}"
    if excerpt.raised_in:
        where += f", raised in {excerpt.raised_in}"
    exception = excerpt.exception
    if folded:
        where = f"not shown: {where}"
        if len(exception) > FOLDED_EXCEPTION:
            exception = exception[:FOLDED_EXCEPTION - 1] + "…"
    lines = [f"{name}: {exception}", f"  ({where})"]
    if any(m in excerpt.exception for m in MODEL_DIR_MISMATCH):
        lines.append("  the script gives TensorFlow a model_dir other than the spec's, which "
                     "TF_CONFIG carries for Estimator jobs: pass "
                     "os.environ['TFCLUSTER_MODEL_DIR'] (the very same string), or set "
                     "\"tf_config_model_dir\": false in the spec")
    return lines
