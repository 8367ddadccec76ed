"""The job loop: start the tasks, stream their output, decide the end, stop everything.

Policy lives here, mechanism in the backends. The end of a job:
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
  restarted alone, or the whole cluster is (a lost ps), or the job fails;
- failure when a task exits with an error (or a monitor says the job stalled): every task is
  stopped and the failing task's last lines are shown;
- Ctrl-C or SIGTERM to the launcher (``launch cancel``, Slurm's warning signal) stops every
  task, as does the whole-job deadline ``timeouts.job``: trainers and the evaluator first,
  the ps once they are gone (``teardown``).

Readiness: with ``readiness`` (the liveness monitor, launcher/liveness.py), a ps that has
not answered TensorFlow's gRPC ``timeouts.start`` seconds after its (re)start fails the job
(exit 1), naming it. Every task starts at once: holding the trainers until the ps answer
did not shorten the time to the first step (docs/benchmarks.md, "Readiness gate"). A task a
monitor reports ``lost`` gets SIGKILL at once (a frozen process does not act on SIGTERM)
before its restart policy is applied.

Monitors see a snapshot of the tasks (orchestrator.decisions.TaskState), never the Job, and
answer in the one decision vocabulary (orchestrator.decisions.Decision). Time comes from an
injected clock and the loop waits through an injected ``wait``, so the rules are tested
against a scripted in-memory backend in milliseconds (tests/support.py).
"""

from __future__ import annotations

import collections
import dataclasses
import os
import signal
import threading
import time
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Callable, Protocol

from launcher.backends.base import Backend, TaskHandle
from launcher.ending import TaskView, TrainingView, end_step
from launcher.events import EventLog
from launcher.output.console import Console
from launcher.output.noise import latest_state
from launcher.output.task_output import pump
from launcher.plan import JobPlan, TaskPlan
from launcher.restarts import RestartBook
from launcher.signals import catch, restore
from launcher.tracebacks import Excerpt, describe, last_exception, tail_box
from orchestrator.decisions import CLUSTER, FAIL, FINISH, IGNORE, LOST, Decision, TaskState
from orchestrator.roles import PRIMARY_ORDER, TRAINERS

if TYPE_CHECKING:
    from launcher.monitors import Monitor

PORT_IN_USE = ("Address already in use", "Failed to add port", "bind: address")
TAIL_LINES = 20
EXITING_GRACE = 1.0     # s a task dying of its own error gets before it is stopped
SIGNALLED = (-signal.SIGTERM, -signal.SIGKILL, 128 + signal.SIGTERM, 128 + signal.SIGKILL)
# TensorFlow's words when the script's own model_dir is not the one in TF_CONFIG.
MODEL_DIR_MISMATCH = ("must have the same value as the model_dir in TF_CONFIG",
                      "are set both in constructor and `RunConfig`, but with different")
RESTART_COUNT = "TFCLUSTER_RESTART_COUNT"


@dataclass
class TaskRun:
    """Runtime state of one task."""

    task: TaskPlan
    log_path: str
    handle: TaskHandle | None = None
    started: float | None = None
    ended: float | None = None
    status: int | None = None
    stopped: bool = False          # ended because the launcher stopped it
    restarts: int = 0
    last_output: float | None = None   # job-loop clock time of its last output line
    tail: collections.deque = field(default_factory=lambda: collections.deque(maxlen=TAIL_LINES))
    pump: threading.Thread | None = None

    @property
    def name(self) -> str:
        return self.task.name

    @property
    def running(self) -> bool:
        return self.handle is not None and self.status is None

    def status_text(self) -> str:
        if self.status is None:
            return "running" if self.handle else "not started"
        if self.status < 0:
            try:
                signame = signal.Signals(-self.status).name
            except ValueError:
                signame = f"signal {-self.status}"
            return f"stopped ({signame})" if self.stopped else f"killed ({signame})"
        return str(self.status)

    def duration(self, now: float | None = None) -> float:
        if self.started is None:
            return 0.0
        return (self.ended if self.ended is not None else
                (now if now is not None else time.monotonic())) - self.started


@dataclass
class JobResult:
    status: int                 # the launcher's exit status
    reason: str
    runs: list[TaskRun]
    duration: float
    training_finished: bool = False   # training was seen done (max_steps, primary exit 0)
    incidents: list[dict] = field(default_factory=list)   # restarts, with what each restarted


class Readiness(Protocol):
    """Says whether a task answered since its start (the liveness monitor does)."""

    def answered(self, name: str, since: float | None) -> bool: ...

    def not_ready_reason(self, name: str, address: str) -> str: ...


class PortConflict(Exception):
    """A task could not bind the port the launcher picked for it (a race with another
    process): the caller re-plans with new ports and starts again."""


def restarted(task: TaskPlan, restarts: int) -> TaskPlan:
    """The task as its ``restarts``-th restart starts: TFCLUSTER_RESTART_COUNT counts the
    run's earlier attempts (the plan's value: a requeued Slurm job) plus these restarts."""
    if not restarts:
        return task
    base = int(task.env.get(RESTART_COUNT, "0") or 0)
    return dataclasses.replace(task, env={**task.env, RESTART_COUNT: str(base + restarts)})


class Job:
    """One run of a plan on a backend."""

    def __init__(self, plan: JobPlan, backend: Backend, run_dir: str, console: Console,
                 monitors: list[Monitor] | None = None, events: EventLog | None = None,
                 clock: Callable[[], float] = time.monotonic,
                 wait: Callable[[float], object] | None = None,
                 readiness: Readiness | None = None,
                 training: Callable[[], TrainingView] | None = None):
        self.plan = plan
        self.backend = backend
        self.run_dir = run_dir
        self.console = console
        self.timeouts = plan.timeouts
        self.clock = clock
        self.wait = wait or self._wait_for_wake
        self.events = events or EventLog(os.path.join(run_dir, "events.jsonl"))
        # The default monitors are made once the tasks started: reading model_dir is not
        # on the way to the first task's start.
        self.monitors: list[Monitor] = list(monitors) if monitors is not None else []
        self._default_monitors = monitors is None
        os.makedirs(os.path.join(run_dir, "logs"), exist_ok=True)
        self.runs = [TaskRun(t, os.path.join(run_dir, "logs", f"{t.type}-{t.index}.log"))
                     for t in plan.tasks]
        self.interrupted: int | None = None
        self.started = clock()
        self.training_done_at: float | None = None   # when the chief or a monitor said so
        self.training = training      # what model_dir says (the coordinator's view)
        self.reached_at: float | None = None   # when a monitor said max_steps was reached
        self.trainers_done_at: float | None = None   # after training: no trainer left
        self.incidents: list[dict] = []   # one per restart decision, with its tasks
        self.wake = threading.Event()  # set when a task's output ends: it is likely exiting
        self.restarts = RestartBook(dict(plan.restart), synchronous=plan.synchronous)
        self.due: dict[str, float] = {}     # task name -> when its restart is due
        self.readiness = readiness
        self._ended: list[TaskRun] = []     # reaped, not yet judged

    def watchers(self) -> list[Monitor]:
        """The monitors of a job by default: the coordinator, watching model_dir, the
        whole-job deadline (``timeouts.job``) and, where the backend reaches the tasks, the
        liveness probe of their TF servers (also the job's ``readiness``)."""
        from launcher.deadline import deadline_monitor
        from launcher.liveness import liveness_monitor
        from launcher.monitors import CoordinatorMonitor
        from orchestrator.coordinator import Coordinator

        t = self.plan.timeouts
        coordinator = Coordinator(self.plan.storage.url, max_steps=self.plan.max_steps,
                                  poll=t["poll"], stall=t["stall"], startup=t["start"],
                                  reader=self.plan.storage.reader())
        liveness = liveness_monitor(self.plan, self.backend, self.events)
        if liveness is not None and self.readiness is None:
            self.readiness = liveness
        return [CoordinatorMonitor(coordinator, self.console, self.events,
                                   not_answering=liveness.not_answering if liveness else None),
                *deadline_monitor(t, self.clock), *([liveness] if liveness else [])]

    # ------------------------------------------------------------------ queries
    def run_of(self, type_: str, index: int = 0) -> TaskRun | None:
        return next((r for r in self.runs if r.task.type == type_ and r.task.index == index),
                    None)

    @property
    def primary(self) -> TaskRun:
        for type_ in PRIMARY_ORDER:
            run = self.run_of(type_, 0)
            if run is not None:
                return run
        raise ValueError("plan has no trainer")

    def live(self) -> list[TaskRun]:
        return [r for r in self.runs if r.running]

    @property
    def restart_count(self) -> int:
        """Restart incidents so far (a cluster restart is one, whatever it restarted)."""
        return len(self.incidents)

    def snapshot(self) -> list[TaskState]:
        """Every task as monitors judge it. A task the job loop is about to restart is
        alive: its restart policy already acted."""
        out = []
        for run in self.runs:
            ended = run.status is not None and run.name not in self.due
            out.append(TaskState(run.name, run.task.type, run.task.address, alive=not ended,
                                 exit_status=run.status_text() if ended else None,
                                 stopped=run.stopped, restarts=run.restarts,
                                 started_at=run.started, restarting=run.name in self.due,
                                 running=run.running))
        return out

    def _wait_for_wake(self, secs: float) -> None:
        self.wake.wait(secs)
        self.wake.clear()

    # ------------------------------------------------------------------ mechanics
    def start_task(self, run: TaskRun) -> None:
        mode = "ab" if run.restarts else "wb"
        log = open(run.log_path, mode)  # noqa: SIM115 - closed by the pump thread
        run.handle = self.backend.start(restarted(run.task, run.restarts))
        run.started, run.ended, run.status, run.stopped = self.clock(), None, None, False
        run.last_output = None
        pid = run.handle.pid
        self.events.write("task_started", task=run.name, address=run.task.address, pid=pid,
                          restarts=run.restarts)
        run.pump = threading.Thread(target=self._pump, args=(run, run.handle, log),
                                    name=f"pump-{run.name}", daemon=True)
        run.pump.start()

    def _pump(self, run: TaskRun, handle: TaskHandle, log) -> None:
        def raw(data: bytes) -> None:
            log.write(data)
            log.flush()

        def line(text: str, partial: bool) -> None:
            if not partial:     # a bar being redrawn is shown, its whole line kept
                run.tail.append(latest_state(text))
            run.last_output = self.clock()
            self.console.task_line(run.name, text)

        try:
            if handle.output is not None:
                pump(handle.output, raw, line, self.clock)
        except (OSError, ValueError):
            pass
        finally:
            log.close()
            self.wake.set()

    def _reap(self) -> list[TaskRun]:
        """Record tasks that ended since the last turn; return them."""
        ended = []
        for run in self.runs:
            if run.running:
                status = run.handle.poll()
                if status is not None:
                    run.status, run.ended = status, self.clock()
                    if run.stopped and status > 0 and status not in SIGNALLED:
                        run.stopped = False     # it failed by itself as it was stopped
                    self.events.write("task_exited", task=run.name, status=status,
                                      stopped=run.stopped, duration=round(run.duration(), 3))
                    ended.append(run)
        self._ended.extend(ended)
        return ended

    def _take_ended(self) -> list[TaskRun]:
        """Every task reaped since the last call, also those reaped while stopping others."""
        self._reap()
        ended, self._ended = self._ended, []
        return ended

    def stop(self, runs: list[TaskRun], reason: str, kill: bool = False) -> None:
        """SIGTERM, then SIGKILL after ``timeouts.kill`` (at once with ``kill``); wait until
        every one is gone."""
        runs = [r for r in runs if r.running]
        if not runs:
            return
        self.events.write("stopping", tasks=[r.name for r in runs], reason=reason,
                          signal="SIGKILL" if kill else "SIGTERM")
        self._let_exiting_tasks_end(runs)
        for run in runs:
            if run.handle.poll() is not None:
                continue        # it ended by itself: reaped below with its own status
            run.stopped = True
            if not kill:
                run.handle.terminate()
        deadline = self.clock() + (0.0 if kill else self.timeouts.get("kill", 5.0))
        while any(r.running for r in runs) and self.clock() < deadline:
            self.wait(0.02)
            self._reap()
        for run in runs:
            if run.running:
                run.handle.kill()
        while any(r.running for r in runs):
            self.wait(0.02)
            self._reap()

    def _let_exiting_tasks_end(self, runs: list[TaskRun]) -> None:
        """A task whose last lines, just printed, end a traceback is dying of its own error
        (TensorFlow's teardown takes a moment): give it up to ``EXITING_GRACE`` s, so that
        it ends with its own status and is not reported as stopped."""
        now = self.clock()
        exiting = [r for r in runs if r.running and r.last_output is not None and
                   now - r.last_output < 2 * EXITING_GRACE and
                   last_exception(list(r.tail)) is not None]
        deadline = now + EXITING_GRACE
        while any(r.running for r in exiting) and self.clock() < deadline:
            self.wait(0.02)
            self._reap()

    # ------------------------------------------------------------------ the loop
    def run(self) -> JobResult:
        previous = self._install_signal_handlers()
        try:
            return self._run()
        finally:
            self.teardown("teardown")
            for run in self.runs:
                if run.pump is not None:
                    run.pump.join(timeout=5)
            for monitor in self.monitors:
                monitor.close()
            restore(previous)

    def _run(self) -> JobResult:
        self.events.write("job_started", run_id=self.plan.run_id, tasks=len(self.runs))
        for run in self.runs:
            if self.interrupted:
                break
            self.start_task(run)
        self.console.info(f"started {len(self.runs)} tasks; logs in {self.run_dir}/logs")
        if self._default_monitors:
            self.monitors = self.watchers()
        while True:
            if self.interrupted:
                name = signal.Signals(self.interrupted).name
                return self._finish(128 + self.interrupted, f"interrupted by {name}")
            for run in self._take_ended():
                failure = self._judge_exit(run, self.training_done_at is not None)
                if failure and run.task.type == "evaluator" and self.training_done_at:
                    failure = f"training finished, but the evaluator failed: {failure}"
                if failure:
                    return self._fail(run, failure)
            for monitor in self.monitors:
                decision = monitor.tick(self.snapshot())
                if decision is None:
                    continue
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
            primary = self.primary
            if self.training_done_at is None and primary.status == 0:
                self.training_done_at = self.clock()
                self.console.info(f"{primary.name} finished; waiting for the others to end")
            if self.training_done_at is not None and self._ended_well():
                return self._finish(0, "training finished and every task ended")
            failure = self._silent_ps()
            if failure:
                return self._finish(1, failure)
            self._start_due()
            self.wait(0.05)

    def _judge_exit(self, run: TaskRun, finishing: bool) -> str | None:
        """Why this exit fails the job, or None when it is fine (or restarts it)."""
        if run.stopped:
            return None
        if run.status != 0:
            if run.pump is not None:
                run.pump.join(timeout=2)    # its last lines tell an error from a kill
            if run.task.auto_port and any(m in line for line in run.tail for m in PORT_IN_USE):
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
        run = next((r for r in self.runs if r.name == decision.task), None)
        if run is None:
            return decision.reason
        if run.name in self.due:
            return None     # already being restarted
        self.stop([run], decision.reason, kill=True)    # lost: it may be frozen
        verdict = self.restarts.judge_lost(run.task.type, run.name, decision.reason)
        return self._apply(verdict, run)

    def _silent_ps(self) -> str | None:
        """Why the job fails when a ps has not answered TensorFlow's gRPC within
        ``timeouts.start`` of its start (the trainers cannot train without it)."""
        if self.readiness is None or self.training_done_at is not None:
            return None
        for run in self.runs:
            if run.task.type == "ps" and run.running and not run.stopped and \
                    self.clock() - run.started >= self.timeouts["start"] and \
                    not self.readiness.answered(run.name, run.started):
                return self.readiness.not_ready_reason(run.name, run.task.address)
        return None

    def _apply(self, verdict: Decision, run: TaskRun) -> str | None:
        """Carry out a restart decision; return the reason when the job must fail."""
        if verdict.action == FAIL:
            return verdict.reason
        if verdict.action == IGNORE:
            return None
        self.console.info(verdict.reason)
        self.events.write("restart_scheduled", task=run.name, scope=verdict.scope,
                          attempt=verdict.attempt, delay=verdict.delay, reason=verdict.reason)
        due = self.clock() + verdict.delay
        if verdict.scope == CLUSTER:
            members = [r for r in self.runs if r.task.type != "evaluator"]
            self.stop([r for r in members if r.running], f"restarting the cluster: {run.name}")
            for member in members:
                self.due[member.name] = due
        else:
            members = [run]
            self.due[run.name] = due
        self.incidents.append({"cause": run.name, "reason": verdict.reason,
                               "scope": verdict.scope, "tasks": [m.name for m in members],
                               "at": round(self.clock() - self.started, 3)})
        return None

    def _start_due(self) -> None:
        """Start again, in plan order, the tasks whose restart is due."""
        now = self.clock()
        if self.training_done_at is not None:   # trainers lost after the end stay down
            self.due = {n: t for n, t in self.due.items() if n.startswith("evaluator")}
        for run in self.runs:
            if run.name in self.due and self.due[run.name] <= now and not self.interrupted:
                del self.due[run.name]
                run.restarts += 1
                run.tail.clear()
                if run.pump is not None:
                    run.pump.join(timeout=2)
                self.start_task(run)

    def _training(self) -> TrainingView:
        """What model_dir says: the ``training`` callable given, else the coordinator's."""
        source = self.training
        if source is None:
            from launcher.monitors import CoordinatorMonitor

            source = next((m.training_view for m in self.monitors
                           if isinstance(m, CoordinatorMonitor)), None)
        view = source() if source is not None else TrainingView(max_steps=self.plan.max_steps)
        if self.reached_at is not None:
            view = replace(view, reached_at=self.reached_at)
        return view

    def _ended_well(self) -> bool:
        """After training: apply the end rules (launcher/ending.py) once per turn; True
        when every task ended."""
        now = self.clock()
        views = [TaskView(r.name, r.task.type, r.running, r.status,
                          quiet_for=now - (r.last_output if r.last_output is not None else
                                           r.started if r.started is not None else now),
                          last_line=r.tail[-1] if r.tail else "",
                          restart_due=r.name in self.due, ended_at=r.ended,
                          started_at=r.started)
                 for r in self.runs]
        if self.trainers_done_at is None and not any(
                v.type in TRAINERS and (v.running or v.restart_due) for v in views):
            self.trainers_done_at = now
        step = end_step(now, views, self._training(), self.timeouts, self.plan.synchronous,
                        self.trainers_done_at, self.training_done_at,
                        estimator=self.plan.strategy == "estimator")
        if step.stop:
            self.console.info(f"stopping {', '.join(step.stop)}: {step.reason}")
            self.stop([r for r in self.runs if r.name in step.stop], step.reason)
            return False
        return step.done

    def _fail(self, run: TaskRun, reason: str) -> JobResult:
        self.console.info(reason)
        if run.pump is not None:
            run.pump.join(timeout=2)
        excerpt = describe(run.log_path)
        if excerpt is not None:
            for line in excerpt_lines(run, excerpt):
                self.console.info(line)
        if run.tail:
            self.console.info(f"last lines of {run.name} ({run.log_path}):")
            for line in tail_box(run.tail):
                self.console.info(f"  | {line}")
        return self._finish(1, reason)

    def teardown(self, reason: str) -> None:
        """Stop every live task in order: the trainers and the evaluator first, the ps once
        they are gone (a ps stopped first leaves trainers hanging, or a checkpoint being
        written half done). Ctrl-C, SIGTERM (``launch cancel``, Slurm's warning signal),
        ``timeouts.job`` and failures all end this way."""
        self.stop([r for r in self.live() if r.task.type != "ps"], reason)
        self.stop(self.live(), reason)

    def _finish(self, status: int, reason: str) -> JobResult:
        self.teardown(reason)
        result = JobResult(status, reason, self.runs, self.clock() - self.started,
                           self.training_done_at is not None, list(self.incidents))
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



def excerpt_lines(run: TaskRun, excerpt: Excerpt) -> list[str]:
    """The exception of a failed task, where its traceback starts, and a hint for the
    errors the launcher can explain."""
    where = f"traceback from line {excerpt.traceback_line} of {run.log_path}"
    if excerpt.raised_in:
        where += f", raised in {excerpt.raised_in}"
    lines = [f"{run.name}: {excerpt.exception}", f"  ({where})"]
    if any(m in excerpt.exception for m in MODEL_DIR_MISMATCH):
        lines.append("  the script gives TensorFlow a model_dir other than the spec's, which "
                     "TF_CONFIG carries for Estimator jobs: pass "
                     "os.environ['TFCLUSTER_MODEL_DIR'] (the very same string), or set "
                     "\"tf_config_model_dir\": false in the spec")
    return lines
