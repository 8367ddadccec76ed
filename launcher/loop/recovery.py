"""An ended or lost task judged, and the verdict carried out: the restart policies
(launcher/restarts.py, the one judge) say restart, drop, ignore or fail; here the task is
restarted alone or with the whole cluster after its back-off, a worker the job goes on
without is dropped (its host watched, launcher/elastic.py's rules) and started again once
its host answers, and a command refused at the first start ends the job (exit 2)."""

from __future__ import annotations

from collections import Counter
from typing import Callable

from launcher.backends.base import Backend
from launcher.errors import UsageError
from launcher.output.console import Console
from launcher.output.failures import folded_lines, lost_its_port, with_exception
from launcher.plan import JobPlan, TaskPlan
from launcher.records.events import EventLog
from launcher.restarts import RestartBook
from launcher.tasks import TaskRun, Tasks
from orchestrator.decisions import CLUSTER, Decision, assert_never
from orchestrator.elastic import PROBE_TIMEOUT, HostWatch, Lost, lost_line, lost_of


class PortConflict(Exception):
    """A task could not bind the port the launcher picked for it (a race with another
    process): the caller re-plans with new ports and starts again."""


class StartFailed(UsageError):
    """A task's command was refused at the job's first start (the kernel, the remote shell
    or the engine would not run it): one line, exit status 2, every task stopped."""


def refused_at_start(run: TaskRun) -> None:
    """After each first start: a command refused (not found, not runnable) ends the job at
    once, one line, exit status 2."""
    if run.handle is not None and run.handle.start_failure:
        raise StartFailed(run.handle.start_failure)


class Recovery:
    """The restarts a job's tasks caused and are due, the workers it goes on without, the
    incidents its closing lines and summary list. ``started``: the job's start (the
    loop's clock), from which incidents and losses are timed."""

    def __init__(self, plan: JobPlan, backend: Backend, tasks: Tasks, console: Console,
                 events: EventLog, started: float):
        self.backend, self.tasks, self.console, self.events = backend, tasks, console, events
        self.clock, self.started = tasks.clock, started
        self.book = RestartBook(dict(plan.restart), synchronous=plan.synchronous,
                                minimum=dict(plan.minimum),
                                counts=dict(Counter(t.type for t in plan.tasks)),
                                primary=tasks.primary.name)
        self.due: dict[str, float] = {}     # task name -> when its restart is due
        self.incidents: list[dict] = []     # one per restart decision, with its tasks
        self.lost: list[Lost] = []          # workers the job goes on without (elastic)
        self.hosts: HostWatch[TaskPlan] = HostWatch(self._answers, self.clock, console.info)

    # ------------------------------------------------------------ judging
    def judge_exit(self, run: TaskRun, finishing: bool) -> str | None:
        """Why this exit fails the job, or None when it is fine (or restarts it)."""
        if run.stopped or run.status is None:
            self.fold(run)
            return None
        if run.status != 0:
            self.tasks.join_output(run)     # its last lines tell an error from a kill
        refused = run.handle.start_failure if run.handle is not None else None
        if refused:     # its command never ran (the output told why)
            if not run.restarts:
                raise StartFailed(refused)
            return self._apply(self.book.judge_refused(run.task.type, run.name, refused), run)
        if run.status != 0 and run.task.auto_port and lost_its_port(run.tail):
            raise PortConflict(f"{run.name} could not bind port {run.task.port}")
        # the exception may be far above the last lines
        tail = with_exception(run.tail, run.log_path) if run.status != 0 else list(run.tail)
        verdict = self.book.judge_exit(run.task.type, run.name, run.status, tail, finishing)
        return self._apply(verdict, run)

    def judge_lost(self, decision: Decision) -> str | None:
        """A monitor's ``lost``: restart the task it names when its policy says so."""
        run = self.tasks.named(decision.task) if decision.task else None
        if run is None:
            return decision.reason
        if run.name in self.due:
            return None     # already being restarted
        self.tasks.stop([run], decision.reason, kill=True)    # lost: it may be frozen
        verdict = self.book.judge_lost(run.task.type, run.name, decision.reason)
        return self._apply(verdict, run)

    def _apply(self, verdict: Decision, run: TaskRun) -> str | None:
        """Carry out a restart policy's verdict; return the reason when the job must fail."""
        action = verdict.action
        if action == "fail":
            self.console.release(run.name)     # as it came: the failure tail follows
            return verdict.reason
        if action == "ignore":
            self.fold(run, verdict.reason)
        elif action == "drop":
            self._drop(run, verdict)
            self.fold(run)
        elif action == "restart":
            self._restart(run, verdict)
        elif action == "finish" or action == "lost":
            raise ValueError(f"{action} is a monitor's word, not a restart policy's")
        else:
            assert_never(action)
        return None

    # ------------------------------------------------------------ carrying out
    def _restart(self, run: TaskRun, verdict: Decision) -> None:
        """The task alone, or every task but the evaluator (a lost ps), after the
        back-off, counted from when they are all down."""
        self.console.info(verdict.reason)
        self.fold(run)
        self.events.write("restart_scheduled", task=run.name, scope=verdict.scope,
                          attempt=verdict.attempt, delay=verdict.delay, reason=verdict.reason)
        members = [run]
        if verdict.scope == CLUSTER:
            self.tasks.cancel_starts()      # those not started yet start with the others
            members = [r for r in self.tasks.runs if r.task.type != "evaluator" and
                       r.name not in self.book.dropped]
            self.tasks.stop([r for r in members if r.running],
                            f"restarting the cluster: {run.name}", restart=True)
            for member in members:
                self.fold(member)
        for member in members:
            self.due[member.name] = self.clock() + verdict.delay
        self.incidents.append({"cause": run.name, "reason": verdict.reason,
                               "scope": verdict.scope, "tasks": [m.name for m in members],
                               "at": round(self.clock() - self.started, 3)})

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

    def start_due(self, training_done: bool, stopping: Callable[[], bool]) -> None:
        """Start again, in plan order, the tasks whose restart is due, and the lost
        workers whose host answers again (not after training: trainers lost then stay
        down). ``stopping``: the launcher was told to stop."""
        self._start_returned(training_done, stopping)
        now = self.clock()
        if training_done:
            self.due = {n: t for n, t in self.due.items() if n.startswith("evaluator")}
        if not any(t <= now for t in self.due.values()):
            return
        for run in self.tasks.runs:
            if run.name in self.due and self.due[run.name] <= now and not stopping():
                del self.due[run.name]
                run.restarts += 1
                self.tasks.start(run)

    def _start_returned(self, training_done: bool, stopping: Callable[[], bool]) -> None:
        for name in self.hosts.returned():
            run = self.tasks.named(name)
            if run is None or training_done or stopping():
                continue
            self.book.back(name)
            for lost in self.lost:
                if lost.task == name and lost.returned_at is None:
                    lost.returned_at = self.clock() - self.started
            self.console.info(f"{name}'s host {run.task.host} answers again: starting "
                              f"{name} again")
            self.events.write("task_returned", task=name)
            run.restarts += 1
            self.tasks.start(run)

    def fold(self, run: TaskRun, why: str | None = None) -> None:
        """A traceback of a task whose end the launcher handled (restarted, tolerated,
        stopped) is folded into its exception and where its traceback is, after ``why``
        when no line said it yet; one that exited 0 printed its own traceback on purpose,
        shown as it came (launcher/output/console.py holds it until now)."""
        if not self.console.holds(run.name):
            return
        if run.status == 0 and not run.stopped:
            self.console.release(run.name)
            return
        self.console.release(run.name, folded_lines(run.name, run.log_path, why))
