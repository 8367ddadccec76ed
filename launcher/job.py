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
task started, or ``WATCH_WITHIN`` seconds into slow starts; launcher/monitors/watching.py
is the loop's one way in to them). Monitors see a snapshot of the tasks
(``Job.snapshot()``, orchestrator.decisions.TaskState: the one snapshot type, which the end
rules and every table read too), never the Job, and answer in the one decision vocabulary
(orchestrator.decisions.Decision, whose ``Action`` mypy checks). Beside the loop: the
notices (launcher/loop/notices.py), the carrying out of the restart policies' verdicts
(launcher/loop/recovery.py) and a failed task's wording (launcher/output/failures.py).
Time comes from an injected ``Pace`` (a clock and a wait), so the rules are tested against
a scripted in-memory backend in milliseconds (tests/scripted_backend.py).
"""

from __future__ import annotations

import os
import signal
import threading
from dataclasses import replace
from typing import Callable

from launcher.backends.base import Backend
from launcher.ending import (
    EndRules,
    JobResult,
    Moments,
    TrainingView,
    end_step,
    own_evaluations,
)
from launcher.errors import UsageError
from launcher.loop.notices import Notices
from launcher.loop.recovery import PortConflict, Recovery, refused_at_start
from launcher.monitors import Watch
from launcher.monitors.watching import Watching
from launcher.output.console import Console
from launcher.output.failures import failure_lines
from launcher.plan import JobPlan
from launcher.records.crash import crash_line, save_traceback
from launcher.records.events import EventLog
from launcher.records.unwritten import Unwritten
from launcher.signals import PREEMPTED, catch, restore
from launcher.tasks import Pace, TaskRun, Tasks
from orchestrator.decisions import Decision, TaskState, assert_never
from orchestrator.elastic import fewer_words
from orchestrator.roles import TRAINERS, names_text, role_counts


class Job:
    """One run of a plan on a backend: the loop's policy over the task mechanics.
    ``watch``: what watches the job, or what builds it once the tasks started;
    ``cancelled``: the SIGTERM came from ``launch cancel``."""

    def __init__(self, plan: JobPlan, backend: Backend, run_dir: str, console: Console,
                 watch: Watch | Callable[[], Watch] | None = None,
                 events: EventLog | None = None, unwritten: Unwritten | None = None,
                 cancelled: Callable[[], bool] = lambda: False, pace: Pace | None = None):
        self.plan, self.run_dir, self.console = plan, run_dir, console
        self.timeouts = plan.timeouts
        pace = pace or Pace()
        self.clock = pace.clock
        self.unwritten = unwritten or Unwritten(console.info)
        self.events = events or EventLog(os.path.join(run_dir, "events.jsonl"),
                                         on_error=self._events_unwritten)
        self.tasks = Tasks(plan.tasks, backend, run_dir, console, self.events, pace,
                           kill_timeout=plan.timeouts.kill,
                           unwritten=self.unwritten)
        self.watching = Watching(watch, len(plan.tasks), self.clock)
        self.moments = Moments(started=self.clock())
        self.rules = EndRules(plan.timeouts, plan.synchronous,
                              estimator=plan.strategy == "estimator")
        self.recovery = Recovery(plan, backend, self.tasks, console, self.events,
                                 self.moments.started)
        self.notices = Notices(plan, backend.notice.sends, self.tasks, console, self.events,
                               self.snapshot, self._training, self._done_by_request)
        self.interrupted: int | None = None
        self.waiting: tuple[float, str] | None = None  # trainers at work past finish: since, who
        self.waited: list[str] = []       # closing lines: whom the end waited for, how long
        self.cut_short: list[str] = []    # what the end stopped in the middle of its work
        self.cancelled = cancelled

    def _events_unwritten(self, error: OSError) -> None:
        self.unwritten.failed("events.jsonl", error)

    # ------------------------------------------------------------------ queries
    def snapshot(self) -> list[TaskState]:
        """Every task now, as monitors, the end rules and the run registry see it. A task
        the job loop is about to restart is alive: its restart policy already acted."""
        return self.tasks.snapshot(restarting=self.recovery.due)

    @property
    def training_done(self) -> bool:
        """Training was seen done (max_steps reached, or the primary task exited 0)."""
        return self.moments.training_done is not None

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
            reason = crash_line(e, save_traceback(e, self.run_dir))
            self.console.info(reason)
            self._stop_all(reason)
            return self._result(1, reason)
        finally:
            self._stop_all("teardown")
            self.tasks.join_output(timeout=5)
            self.watching.close()
            restore(previous)

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
                             after=refused_at_start)
        announced = False
        while True:
            self.tasks.check_starts()
            self.watching.attach(bool(self.tasks.starting), self.moments.started)
            if not announced and not self.tasks.starting:
                announced = True
                self._announce()
            if self.interrupted:
                return self._interrupted()
            result = self._judge_exits() or self._tick_monitors()
            if result is None:
                self.notices.save_at_max_steps(self.training_done)
                result = self._judge_turn()
            if result is not None:
                return result
            self.recovery.start_due(self.training_done, lambda: bool(self.interrupted))
            # a turn is O(N) (every task polled): with many tasks the loop turns as often
            # as the monitors tick, leaving the starts the CPU; an exit that closes a
            # task's output wakes it at once either way
            self.tasks.wait(self.watching.every)

    def _judge_exits(self) -> JobResult | None:
        """The tasks that ended since the last turn, each through its restart policy; the
        job's failure when one says so."""
        for run in self.tasks.take_ended():
            if run.name in self.recovery.due:
                continue        # a restart decided in this turn covers its exit
            self.notices.handler_exit(run)      # stopped on request when it is
            failure = self.recovery.judge_exit(run, self.training_done)
            if failure and run.task.type == "evaluator" and self.training_done:
                failure = f"training finished, but the evaluator failed: {failure}"
            if failure:
                return self._fail(run, failure)
        return None

    def _tick_monitors(self) -> JobResult | None:
        """The monitors' decisions, each acted on, until one ends the job."""
        for decision in self.watching.decisions(self.snapshot):
            result = self._act_on(decision)
            if result is not None:
                return result
        return None

    def _act_on(self, decision: Decision) -> JobResult | None:
        """A monitor's decision: fail the job, judge a loss, or note training done."""
        action = decision.action
        if action == "fail":
            return self._finish(1, decision.reason)
        if action == "lost":
            failure = self.recovery.judge_lost(decision)
            return self._finish(1, failure) if failure else None
        if action == "finish":
            if self.moments.reached is None:
                self.moments = replace(self.moments, reached=self.clock())
            if not self.training_done:
                self.console.info(decision.reason)
                self.moments = replace(self.moments, training_done=self.clock())
            return None
        if action == "restart" or action == "ignore" or action == "drop":
            raise ValueError(f"a monitor answered {action}, a restart policy's word")
        assert_never(action)

    def _done_by_request(self) -> None:
        """The save request at max_steps went out: training is done, max_steps reached."""
        now = self.clock()
        self.moments = replace(self.moments, training_done=self.moments.training_done or now,
                               reached=self.moments.reached or now)

    def _judge_turn(self) -> JobResult | None:
        """The primary's exit 0 marks training done; a job whose tasks all ended well
        succeeds; a silent ps fails it."""
        primary = self.tasks.primary
        if not self.training_done and primary.status == 0:
            self.moments = replace(self.moments, training_done=self.clock())
            others = [r.name for r in self.tasks.live()]
            self.console.info(f"{primary.name} finished" + (
                f"; waiting for {names_text(others)} to end" if others else ""))
        if self.training_done and self._ended_well():
            fewer = fewer_words(self.recovery.lost)
            return self._finish(0, f"training finished with {fewer} and every other "
                                   f"task ended" if fewer else
                                "training finished and every task ended")
        failure = None if self.training_done else self.watching.silent_ps(
            ((r.name, r.task.address, r.started) for r in self.tasks.runs
             if r.task.type == "ps" and r.running and not r.stopped and r.started is not None),
            self.timeouts.start)
        return self._finish(1, failure) if failure else None

    def _interrupted(self) -> JobResult:
        """Ctrl-C, SIGHUP: the ordered stop. SIGTERM while training runs is a preemption
        notice (launcher/loop/notices.py): the savers save first, within timeouts.preempt."""
        name = signal.Signals(self.interrupted or signal.SIGTERM).name
        if self.interrupted != signal.SIGTERM or not self.timeouts.preempt or \
                self.training_done:
            return self._finish(128 + (self.interrupted or 0), f"interrupted by {name}")
        outcome = self.notices.preempt(lambda: self.watching.tick_quietly(self.snapshot))
        if self.cancelled():
            return self._finish(128 + signal.SIGTERM, f"interrupted by {name}")
        return self._finish(PREEMPTED, f"preempted by {name}; {outcome}")

    def _announce(self) -> None:
        """One line once every task started: how many of each role, and how long it took."""
        runs = [r for r in self.tasks.runs if r.handle is not None]
        of = "" if len(runs) == len(self.tasks.runs) else f" of {len(self.tasks.runs)}"
        took = self.clock() - self.moments.started
        self.console.info(f"started {len(runs)}{of} tasks ({role_counts([r.name for r in runs])})"
                          f" in {took:.1f}s; logs in {self.run_dir}/logs")

    def _training(self, tasks: list[TaskState]) -> TrainingView:
        """What model_dir says (the coordinator's view), as the end rules read it;
        ``tasks``: this turn's snapshot."""
        view = own_evaluations(self.watching.training(self.plan.max_steps), tasks)
        view = self.notices.seen_by(view)
        if self.moments.reached is not None:
            view = replace(view, reached_at=self.moments.reached)
        return view

    def _ended_well(self) -> bool:
        """After training: apply the end rules (launcher/ending.py) once per turn; True
        when every task ended."""
        now = self.clock()
        tasks = self.snapshot()
        if self.notices.saving:
            return False        # the savers save on request: nothing is stopped meanwhile
        if self.moments.trainers_done is None and not any(
                t.type in TRAINERS and (t.running or t.restarting) for t in tasks):
            self.moments = replace(self.moments, trainers_done=now)
        step = end_step(now, self.moments, tasks, self._training(tasks), self.rules)
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
        bound = f"at most timeouts.save {self.timeouts.save:g}s from " \
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
        for line in failure_lines(run.name, run.log_path, run.status,
                                  run.handle.pid if run.handle is not None else None,
                                  list(run.tail)):
            self.console.info(line)
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
        preemption, save_request = self.notices.records()
        recovery = self.recovery
        result = JobResult(status, reason, self.snapshot(), self.clock() - self.moments.started,
                           self.training_done, list(recovery.incidents),
                           self.unwritten.lines(), [lost.to_dict() for lost in recovery.lost],
                           waited=list(self.waited), cut_short=list(self.cut_short),
                           preemption=preemption, save_request=save_request)
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
