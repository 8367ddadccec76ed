"""A scripted in-memory backend for fast tests of the real job loop: no process, no port,
no sleep. Each task follows a ``Script`` per start (its first start, then each restart):
exit with a status at a time, ignore SIGTERM, print lines (a bind error, a traceback).
Time is a FakeClock that the job loop's ``wait`` advances.

    backend = ScriptedBackend({"chief:0": [Script(exit_at=3)], "ps:0": [Script()]})
    result = run_job(spec_doc, backend, tmp_path)
"""

from __future__ import annotations

import contextlib
import io
import json
import signal
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field

from support import FakeClock

from launcher.api import parse_spec
from launcher.backends import register, unregister
from launcher.backends.base import Backend, ProbeResult, TaskHandle
from launcher.job import Job, JobResult
from launcher.monitors import Watch
from launcher.output.console import Console
from launcher.plan import JobPlan, TaskPlan, build_plan
from launcher.tasks import Pace
from orchestrator.elastic import ASKING


@dataclass
class Script:
    """What one start of a task does. ``exit_at``: seconds after its start when it exits
    with ``status`` by itself (None: it runs until stopped). ``term_takes``: seconds a
    SIGTERM takes to end it (TensorFlow's own teardown), then it exits with
    ``term_status`` (None: killed by SIGTERM) after printing ``term_lines``."""

    exit_at: float | None = None
    status: int = 0
    ignores_term: bool = False
    lines: list[str] = field(default_factory=list)
    term_takes: float = 0.0
    term_status: int | None = None
    term_lines: list[str] = field(default_factory=list)
    # a signal ignored by default (SIGURG: the preemption notice) leaves it running; it
    # prints these lines
    notice_lines: list[str] = field(default_factory=list)
    # s after the first notice when it exits with ``status`` by itself (its save made);
    # None: the notice does not end it
    notice_exit: float | None = None


IGNORED_BY_DEFAULT = (signal.SIGURG, signal.SIGWINCH, signal.SIGCHLD)


class Output:
    """A task's output as a process gives it: its lines, then end of file only once the
    task has ended (as a pipe closes at exit)."""

    def __init__(self, lines: list[bytes]):
        self.lines = list(lines)
        self._changed = threading.Condition()
        self._closed = False
        self._reading = False       # its reader is back for more: every line taken is handled
        self._ended = False         # its reader got the end of the stream

    def readline(self) -> bytes:
        with self._changed:
            self._reading = True
            self._changed.notify_all()
            self._changed.wait_for(lambda: self.lines or self._closed)
            self._reading = False
            if self.lines:
                return self.lines.pop(0)
            self._ended = True
            self._changed.notify_all()
            return b""

    def settle(self, timeout: float = 5.0) -> None:
        """Waits (real time) until the reader has handled every line given so far: as a
        process's lines reach the launcher before time goes on, whatever the load."""
        with self._changed:
            self._changed.wait_for(lambda: self._ended or (self._reading and not self.lines),
                                   timeout)

    def add(self, lines: list[bytes]) -> None:
        with self._changed:
            self.lines += lines
            self._changed.notify_all()

    def close_at_exit(self) -> None:
        with self._changed:
            self._closed = True
            self._changed.notify_all()


class ScriptedHandle(TaskHandle):
    def __init__(self, task: TaskPlan, script: Script, clock: FakeClock):
        self.task = task
        self.script = script
        self.clock = clock
        self.started = clock()
        self.ended: int | None = None
        self.signals: list[int] = []
        self.signal_times: list[float] = []     # when each of ``signals`` came
        self.termed: float | None = None      # when a slow SIGTERM arrived
        self.signalled_at: float | None = None     # when the first signal came
        self.noticed: float | None = None       # when the first notice (SIGURG) came
        self._output = Output([f"{line}\n".encode() for line in script.lines])
        self.read = False           # the job loop took its output to read it

    @property
    def output(self) -> Output:
        self.read = True
        return self._output

    def settle(self) -> None:
        """Its output, when the job loop reads it, read up to what it printed so far."""
        if self.read:
            self._output.settle()

    def poll(self) -> int | None:
        s = self.script
        if self.ended is None and s.exit_at is not None and \
                self.clock() - self.started >= s.exit_at:
            self.ended = s.status
        if self.ended is None and s.notice_exit is not None and self.noticed is not None \
                and self.clock() - self.noticed >= s.notice_exit:
            self.ended = s.status
        if self.ended is None and self.termed is not None and \
                self.clock() - self.termed >= s.term_takes:
            self.ended = -signal.SIGTERM if s.term_status is None else s.term_status
        if self.ended is not None:
            self._output.close_at_exit()
        return self.ended

    def signal(self, sig: int) -> None:
        self.signals.append(sig)
        self.signal_times.append(self.clock())
        if self.signalled_at is None:
            self.signalled_at = self.clock()
        if self.poll() is not None:
            return
        if sig in IGNORED_BY_DEFAULT:
            if sig == signal.SIGURG and self.noticed is None:
                self.noticed = self.clock()
            self._output.add([f"{line}\n".encode() for line in self.script.notice_lines])
            return
        if sig == signal.SIGTERM and self.script.term_takes and not self.script.ignores_term:
            if self.termed is None:
                self.termed = self.clock()
                self._output.add([f"{line}\n".encode() for line in self.script.term_lines])
            self.poll()
            return
        if sig == signal.SIGKILL or not (sig == signal.SIGTERM and self.script.ignores_term):
            self.ended = -sig
            self._output.close_at_exit()


class ScriptedBackend(Backend):
    """Starts ScriptedHandles; ``starts`` records every start in order."""

    name = "scripted"
    local_processes = True

    def __init__(self, scripts: dict[str, list[Script]], options=None,
                 answers: dict[str, list[bool]] | None = None):
        """``answers``: host -> whether it answers each probe in turn (the last one
        repeats); a host not named always answers."""
        super().__init__(options)
        self.scripts = scripts
        self.answers = answers or {}
        self.probes: list[tuple[float, str]] = []
        self.clock = FakeClock()
        self.starts: list[tuple[float, str]] = []
        self.handles: dict[str, list[ScriptedHandle]] = {}
        self._port = 30000

    def allocate_port(self, host: str) -> int:
        self._port += 1
        return self._port

    def wait(self, seconds: float) -> None:
        """The job loop's wait: every task's output read so far, then the fake clock on."""
        for handles in list(self.handles.values()):
            for handle in handles:
                handle.settle()
        for thread in threading.enumerate():    # a host's answer comes before time goes on
            if thread.name.startswith(ASKING):
                thread.join(5)
        self.clock.sleep(seconds)

    def probe(self, task: TaskPlan, argv: list[str], timeout: float) -> ProbeResult:
        self.probes.append((self.clock(), task.host))
        answers = self.answers.get(task.host, [True])
        answer = answers.pop(0) if len(answers) > 1 else answers[0]
        return ProbeResult(0 if answer else 255, "" if answer else "ssh: connect to host")

    def start(self, task: TaskPlan) -> TaskHandle:
        done = self.handles.setdefault(task.name, [])
        plan = self.scripts.get(task.name, [Script()])
        handle = ScriptedHandle(task, plan[min(len(done), len(plan) - 1)], self.clock)
        done.append(handle)
        self.starts.append((self.clock(), task.name))
        return handle


@contextlib.contextmanager
def scripted_registered() -> Iterator[None]:
    """``"backend": "scripted"`` works inside (tests/conftest.py's ``scripted_backend``)."""
    register("scripted", ScriptedBackend)      # the one line that makes it a backend
    try:
        yield
    finally:
        unregister("scripted")


class Lines(io.StringIO):
    """Console output kept for assertions."""

    @property
    def lines(self) -> list[str]:
        return self.getvalue().splitlines()


def scripted_plan(spec_doc: dict, backend: ScriptedBackend, run_dir, **plan_kwargs
                  ) -> JobPlan:
    """The plan of the spec ``spec_doc`` (backend "scripted") on ``backend``."""
    doc = {"command": ["train"], "model_dir": str(run_dir / "model"), "backend": "scripted",
           **spec_doc}
    spec = parse_spec(json.dumps(doc))
    return build_plan(spec, port_for=backend.allocate_port, place=backend.place,
                      backend=backend.name, **plan_kwargs)


def run_job(spec_doc: dict, backend: ScriptedBackend, run_dir, monitors=(), training=None,
            before=None, **plan_kwargs) -> tuple[JobResult, Lines]:
    """Run the real job loop over ``backend`` on the spec ``spec_doc`` (backend
    "scripted"); return the result and what the console printed. ``training``: the view of
    model_dir the end rules read (launcher.ending.TrainingView), as the coordinator gives."""
    plan = scripted_plan(spec_doc, backend, run_dir, **plan_kwargs)
    out = Lines()
    job = Job(plan, backend, str(run_dir / "run"), Console(out, out),
              Watch(list(monitors), training=training), pace=Pace(backend.clock, backend.wait))
    if before is not None:      # the test's hand on the job (a signal to the launcher)
        before(job)
    return job.run(), out
