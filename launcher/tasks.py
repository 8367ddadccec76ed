"""Task mechanics: start a job's task processes, pump their output, reap their exits and
stop them (SIGTERM, then SIGKILL), as torch elastic keeps its ``PContext`` apart from the
agent. What to do about an exit is the job loop's policy (launcher/job.py); what a task
looks like at one moment is one snapshot type, ``orchestrator.decisions.TaskState``.

Starting hundreds of tasks takes seconds, so a backend may start them off the job loop's
thread (``Backend.start_threads``; the local backend: 16, no more than it has tasks):
``start_all`` queues them, in plan order, to a pool of threads, and the loop reaps exits,
judges failures and answers Ctrl-C while tasks still start; ``cancel_starts`` drops the
starts not begun and waits for those under way before the loop stops what runs. The
pool's threads live as long as the process: a task's parent-death signal
(launcher/backends/processes.py) follows the thread that started it."""

from __future__ import annotations

import collections
import dataclasses
import functools
import os
import queue
import signal
import threading
import time
from collections.abc import Collection
from dataclasses import dataclass, field
from typing import IO, Callable

from launcher.backends.base import Backend, TaskHandle
from launcher.ending import evaluated_in
from launcher.output.console import Console
from launcher.output.noise import latest_state
from launcher.output.reader import READER
from launcher.output.tracebacks import last_exception
from launcher.plan import TaskPlan
from launcher.records.events import EventLog
from launcher.records.unwritten import Unwritten
from orchestrator.decisions import TaskState, state_words
from orchestrator.roles import primary_task

TAIL_LINES = 20
EXITING_GRACE = 1.0     # s a task dying of its own error gets before it is stopped
SIGNALLED = (-signal.SIGTERM, -signal.SIGKILL, 128 + signal.SIGTERM, 128 + signal.SIGKILL)
RESTART_COUNT = "TFCLUSTER_RESTART_COUNT"


@dataclass
class TaskRun:
    """Runtime state of one task (mutable; the job loop and its readers see snapshots)."""

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
    output_done: threading.Event | None = None     # set once its output was read to the end
    evaluated: int | None = None   # the newest evaluation its own output announced

    @property
    def name(self) -> str:
        return self.task.name

    @property
    def running(self) -> bool:
        return self.handle is not None and self.status is None

    def duration(self, now: float) -> float:
        if self.started is None:
            return 0.0
        return (self.ended if self.ended is not None else now) - self.started

    def snapshot(self, now: float, restarting: bool = False) -> TaskState:
        """This task at ``now`` (job-loop clock). ``restarting``: it ended and the job loop
        is about to start it again: it is alive, its restart policy already acted."""
        ended = self.status is not None and not restarting
        quiet_since = self.last_output if self.last_output is not None else \
            self.started if self.started is not None else now
        running = self.running
        return TaskState.of(
            name=self.name, type=self.task.type, address=self.task.address, alive=not ended,
            exit_status=state_words(self.status, running, self.stopped) if ended else None,
            stopped=self.stopped, restarts=self.restarts, started_at=self.started,
            restarting=restarting, running=running, status=self.status, ended_at=self.ended,
            quiet_for=now - quiet_since, last_line=self.tail[-1] if self.tail else "",
            duration=self.duration(now), log=self.log_path,
            pid=self.handle.pid if self.handle is not None else None, gpus=self.task.gpus,
            evaluated=self.evaluated)


def restarted(task: TaskPlan, restarts: int) -> TaskPlan:
    """The task as its ``restarts``-th restart starts: TFCLUSTER_RESTART_COUNT counts the
    run's earlier attempts (the plan's value: a requeued Slurm job) plus these restarts."""
    if not restarts:
        return task
    base = int(task.env.get(RESTART_COUNT, "0") or 0)
    return dataclasses.replace(task, env={**task.env, RESTART_COUNT: str(base + restarts)})


class TaskLog:
    """A task's log file, created with the task's first output, or at its end if it wrote
    nothing (truncated at its first start, appended to at a restart): creating 1,000 files
    was a third of the launcher's CPU while 1,000 tasks started. ``write`` and ``close``
    raise what ``open`` raises."""

    def __init__(self, path: str, append: bool):
        self.path, self.mode = path, "ab" if append else "wb"
        self._file: IO[bytes] | None = None

    def write(self, data: bytes) -> None:
        if self._file is None:
            self._file = open(self.path, self.mode)  # noqa: SIM115 - closed by close()
        self._file.write(data)
        self._file.flush()

    def close(self) -> None:
        if self._file is None:
            self._file = open(self.path, self.mode)  # noqa: SIM115 - the file exists after
        self._file.close()


class StartPool:
    """Threads that start tasks for every job of this process, fed in order from one
    queue; they never end (a task's parent-death signal follows its starting thread)."""

    def __init__(self) -> None:
        self._queue: queue.SimpleQueue[Callable[[], None]] = queue.SimpleQueue()
        self._threads: list[threading.Thread] = []
        self._lock = threading.Lock()

    def submit(self, work: Callable[[], None], threads: int) -> None:
        with self._lock:
            while len(self._threads) < threads:
                thread = threading.Thread(target=self._work, daemon=True,
                                          name=f"start-{len(self._threads)}")
                thread.start()
                self._threads.append(thread)
        self._queue.put(work)

    def _work(self) -> None:
        while True:
            self._queue.get()()


START_POOL = StartPool()


@dataclass(frozen=True)
class Pace:
    """The job loop's time: its clock, and how it waits between turns (None: until a
    task's output ends, at most the seconds given). Tests script both."""

    clock: Callable[[], float] = time.monotonic
    wait: Callable[[float], object] | None = None


class Tasks:
    """The processes of a plan's tasks on a backend: started, their output pumped into
    their logs and the console, their exits reaped, stopped on demand."""

    def __init__(self, plan_tasks: list[TaskPlan], backend: Backend, run_dir: str,
                 console: Console, events: EventLog, pace: Pace = Pace(),
                 kill_timeout: float = 5.0, unwritten: Unwritten | None = None):
        self.backend = backend
        self.console = console
        self.events = events
        self.clock = pace.clock
        self.wait = pace.wait or self._wait_for_output
        self.kill_timeout = kill_timeout
        self.unwritten = unwritten or Unwritten(console.info)
        try:
            os.makedirs(os.path.join(run_dir, "logs"), exist_ok=True)
        except OSError as e:
            self.unwritten.failed("task logs", e, ": task output is being dropped")
        self.runs = [TaskRun(t, os.path.join(run_dir, "logs", f"{t.type}-{t.index}.log"))
                     for t in plan_tasks]
        self.wake = threading.Event()  # set when a task's output ends: it is likely exiting
        self._ended: list[tuple[TaskRun, int]] = []   # reaped, not yet taken: run, attempt
        self._for_restart: set[str] = set()     # being stopped for a restart
        self._starts = threading.Condition()
        self._queued: set[str] = set()      # tasks queued to the start pool, not begun
        self._in_flight = 0                 # starts under way in the pool
        self._start_errors: list[BaseException] = []

    # ------------------------------------------------------------------ queries
    def run_of(self, type_: str, index: int = 0) -> TaskRun | None:
        return next((r for r in self.runs if r.task.type == type_ and r.task.index == index),
                    None)

    def named(self, name: str) -> TaskRun | None:
        return next((r for r in self.runs if r.name == name), None)

    @property
    def primary(self) -> TaskRun:
        run = primary_task(self.runs)
        if run is None:
            raise ValueError("plan has no trainer")
        return run

    def live(self) -> list[TaskRun]:
        return [r for r in self.runs if r.running]

    def snapshot(self, restarting: Collection[str] = frozenset()) -> list[TaskState]:
        """Every task now; those named in ``restarting`` are about to start again."""
        now = self.clock()
        return [r.snapshot(now, r.name in restarting) for r in self.runs]

    def _wait_for_output(self, secs: float) -> None:
        self.wake.wait(secs)
        self.wake.clear()

    # ------------------------------------------------------------------ mechanics
    def start_all(self, runs: list[TaskRun], stop: Callable[[], bool],
                  after: Callable[[TaskRun], None] = lambda run: None) -> None:
        """Start ``runs`` in order, ``after(run)`` following each start: here, one after
        another until ``stop()`` says so, when the backend starts tasks on the loop's thread
        (``start_threads`` 0); else queued to the start pool, returning at once
        (``starting`` counts those not started yet; ``check_starts`` raises what a start or
        ``after`` raised)."""
        threads = self.backend.start_threads
        if threads <= 0:
            for run in runs:
                if stop():
                    break
                self.start(run)
                after(run)
            return
        with self._starts:
            self._queued.update(r.name for r in runs)
        threads = min(threads, len(runs))     # a small job needs no more threads than tasks
        for run in runs:
            START_POOL.submit(functools.partial(self._start_queued, run, after), threads)

    def _start_queued(self, run: TaskRun, after: Callable[[TaskRun], None]) -> None:
        with self._starts:
            if run.name not in self._queued:
                return              # cancelled
            self._queued.discard(run.name)
            self._in_flight += 1
        try:
            self.start(run)
            after(run)
        except BaseException as e:  # noqa: BLE001 - raised on the loop's thread
            with self._starts:
                self._start_errors.append(e)
        finally:
            with self._starts:
                self._in_flight -= 1
                self._starts.notify_all()
                # the loop turns at its pace while tasks start (a turn is O(N)); it is woken
                # for a start that failed and once the last one is done
                wake = bool(self._start_errors) or not (self._queued or self._in_flight)
            if wake:
                self.wake.set()

    @property
    def starting(self) -> int:
        """Tasks queued to the start pool and not started yet."""
        with self._starts:
            return len(self._queued) + self._in_flight

    def check_starts(self) -> None:
        """On the loop's thread: raise the first error a pooled start met, as a start on
        the loop's thread would have."""
        with self._starts:
            if self._start_errors:
                raise self._start_errors.pop(0)

    def cancel_starts(self) -> None:
        """Drop the queued starts not begun; wait for those under way, so that whatever
        started can be stopped."""
        with self._starts:
            self._queued.clear()
            while self._in_flight:
                self._starts.wait(0.1)

    def start(self, run: TaskRun) -> None:
        """Start the task (again, after a restart: its log is appended to). A command that
        was refused (``handle.start_failure``) is in its log, and ends as an exit."""
        run.tail.clear()
        if run.output_done is not None:
            run.output_done.wait(timeout=2)
        handle = self.backend.start(restarted(run.task, run.restarts))
        log: TaskLog | None = TaskLog(run.log_path, append=bool(run.restarts))
        run.started, run.ended, run.status, run.stopped = self.clock(), None, None, False
        run.last_output = None
        run.handle = handle         # last: the loop (another thread) sees it running now
        self.events.write("task_started", task=run.name, address=run.task.address,
                          pid=handle.pid, restarts=run.restarts)
        if handle.start_failure:
            self._write_line(run, log, handle.start_failure)
            log = None
        run.output_done = threading.Event()
        self._read_output(run, handle, log, run.output_done)

    def _write_line(self, run: TaskRun, log: TaskLog | None, line: str) -> None:
        """``line`` into the task's log (closed after), its tail and the console."""
        if log is not None:
            try:
                log.write(line.encode() + b"\n")
                log.close()
            except OSError as e:
                self.unwritten.log_failed(run.name, e)
        run.tail.append(line)
        self.console.task_line(run.name, line)

    def _read_output(self, run: TaskRun, handle: TaskHandle, log: TaskLog | None,
                     done: threading.Event) -> None:
        """Have the output reader (launcher/output/reader.py) drain the task's output
        whatever happens to its log file: a task blocked on a full pipe would hang the job,
        and its training is in model_dir, not here. ``done`` is set once it was read to its
        end and the log closed."""
        def raw(data: bytes) -> None:
            nonlocal log
            log = self._log_data(run, log, data)

        def line(text: str, partial: bool) -> None:
            if not partial:     # a bar being redrawn is shown, its whole line kept
                run.tail.append(latest_state(text))
                step = evaluated_in(text)
                if step is not None and (run.evaluated is None or step > run.evaluated):
                    run.evaluated = step
            run.last_output = self.clock()
            self.console.task_line(run.name, text)

        def ended() -> None:
            if log is not None:
                try:
                    log.close()
                except OSError as e:
                    self.unwritten.log_failed(run.name, e)
            done.set()
            self.wake.set()

        if handle.output is None:
            ended()
        else:
            READER.add(handle.output, raw, line, ended, self.clock)

    def _log_data(self, run: TaskRun, log: TaskLog | None, data: bytes) -> TaskLog | None:
        """Write output to the task's log; the log, or None once it failed (then what
        comes is counted as dropped)."""
        if log is None:
            self.unwritten.drop(run.name, data)
            return None
        try:
            log.write(data)
            return log
        except (OSError, ValueError) as e:
            self.unwritten.log_failed(run.name, e)
            self.unwritten.drop(run.name, data)
            try:
                log.close()
            except OSError:
                pass
            return None

    def reap(self) -> list[TaskRun]:
        """Record tasks that ended since the last turn; return them."""
        ended = []
        for run in self.runs:
            if run.handle is not None and run.status is None:      # running
                status = run.handle.poll()
                if status is not None:
                    run.status, run.ended = status, self.clock()
                    restart = run.name in self._for_restart
                    if run.stopped and status > 0 and status not in SIGNALLED and not restart:
                        run.stopped = False     # it failed by itself as it was stopped
                    self.events.write("task_exited", task=run.name, status=status,
                                      stopped=run.stopped,
                                      duration=round(run.duration(self.clock()), 3))
                    ended.append(run)
                    if not restart:
                        self._ended.append((run, run.restarts))
        return ended

    def take_ended(self) -> list[TaskRun]:
        """Every task reaped since the last call, also those reaped while stopping others,
        whose exit is the current attempt's: not one the launcher stopped for a restart
        (the launcher's own doing, never judged), not an earlier attempt's."""
        self.reap()
        ended, self._ended = self._ended, []
        return [run for run, attempt in ended
                if attempt == run.restarts and run.status is not None]

    def stop(self, runs: list[TaskRun], reason: str, kill: bool = False,
             restart: bool = False) -> None:
        """SIGTERM, then SIGKILL after ``kill_timeout`` (at once with ``kill``); wait until
        every one is gone. ``restart``: they are stopped to start again, so their exits
        belong to the attempt that ends here and are not handed to ``take_ended``."""
        runs = [r for r in runs if r.running]
        if not runs:
            return
        names = {r.name for r in runs} if restart else set()
        self._for_restart |= names
        try:
            self._stop(runs, reason, kill)
        finally:
            self._for_restart -= names

    def _stop(self, runs: list[TaskRun], reason: str, kill: bool) -> None:
        self.events.write("stopping", tasks=[r.name for r in runs], reason=reason,
                          signal="SIGKILL" if kill else "SIGTERM")
        self.console.stopping([r.name for r in runs], reason)
        try:
            self._signal_and_wait(runs, kill)
        finally:
            self.console.stopping([], "")

    def _signal_and_wait(self, runs: list[TaskRun], kill: bool) -> None:
        self._let_exiting_tasks_end(runs)
        for run in runs:
            if run.handle is None or run.handle.poll() is not None:
                continue        # it ended by itself: reaped below with its own status
            run.stopped = True
            if not kill:
                run.handle.terminate()
        deadline = self.clock() + (0.0 if kill else self.kill_timeout)
        while any(r.running for r in runs) and self.clock() < deadline:
            self.wait(0.02)
            self.reap()
        for run in runs:
            if run.handle is not None and run.status is None:      # running
                run.handle.kill()
        while any(r.running for r in runs):
            self.wait(0.02)
            self.reap()

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
            self.reap()

    def join_output(self, run: TaskRun | None = None, timeout: float = 2) -> None:
        """Wait for the output of ``run`` (every task when None) to be read to its end."""
        deadline = time.monotonic() + timeout
        for r in [run] if run is not None else self.runs:
            if r.output_done is not None:
                r.output_done.wait(max(0.0, deadline - time.monotonic()))
