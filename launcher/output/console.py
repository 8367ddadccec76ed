"""The console: tasks' lines on stdout with a prefix, the launcher's own on stderr.

TensorFlow's routine output (deprecation notices, banners, INFO chatter: launcher/output/
noise.py) is kept in the task logs but not printed unless ``verbose``; a ``\\r``-redrawn
progress bar is printed as its latest state; a line with nothing in it is not printed. On a
terminal, ``make_console`` (launcher/output/terminal.py) gives the live view instead
(launcher/output/live.py).

A traceback is held, not printed, from its first line until the job loop knows what the
task's exit means (``release``): a failure the launcher handles (the task is restarted, or
its exit tolerated) is folded into a few lines (``fold``), any other is printed as it came.
A task still alive ``HOLD`` s after its traceback began (an exception it logged and went
on) has its held lines printed with its next line. Every line, shown or hidden, also goes
to ``steps`` (launcher/output/trainer_steps.py): the trainers' own word on their step."""

from __future__ import annotations

import sys
import threading
import time
from typing import IO, Any, Callable

from launcher.output.noise import NoiseFilter, latest_state
from launcher.output.pipes import write
from launcher.output.tracebacks import fold_data
from launcher.output.trainer_steps import TrainerSteps
from orchestrator.roles import TRAINERS

TRACEBACK = "Traceback (most recent call last):"
HOLD = 10.0         # s a live task's traceback is held at most
HOLD_MAX = 2000     # lines held at most per task


class Console:
    """Thread-safe output: tasks' lines on stdout with a prefix, the launcher's on stderr."""

    def __init__(self, out: IO[str] | None = None, err: IO[str] | None = None,
                 quiet: bool = False, verbose: bool = False,
                 clock: Callable[[], float] = time.monotonic):
        self.out = out or sys.stdout
        self.err = err or sys.stderr
        self.quiet = quiet
        self.verbose = verbose
        self.clock = clock
        self.lock = threading.Lock()
        self.filters: dict[str, NoiseFilter] = {}
        self.held: dict[str, tuple[float, list[str]]] = {}   # task -> (since, lines)
        self.steps = TrainerSteps(clock)

    def shows(self, name: str, line: str) -> str | None:
        """The line as the console prints it, or None when it is not printed."""
        line = latest_state(line)    # a bar redrawn in place: its last state, as shown
        if name.split(":", 1)[0] in TRAINERS:
            self.steps.see(name, line)
        if self.quiet:
            return None
        if not line.strip():
            return None         # nothing after the prefix: the log has it
        if self.verbose:
            return line
        with self.lock:
            keep = self.filters.setdefault(name, NoiseFilter()).show(line)
        return line if keep else None

    def task_line(self, name: str, line: str) -> None:
        shown = self.shows(name, line)
        if shown is None:
            return
        for each in self._hold(name, shown):
            self.print_task_line(name, each)

    def _hold(self, name: str, line: str) -> list[str]:
        """The lines to print now: none while ``name``'s traceback is held."""
        with self.lock:
            since, lines = self.held.get(name, (None, []))
            if since is None and line.startswith(TRACEBACK):
                since = self.clock()
            if since is None:
                return [line]
            lines.append(line)
            if self.clock() - since < HOLD and len(lines) < HOLD_MAX:
                self.held[name] = (since, lines)
                return []
            self.held.pop(name, None)
            return lines

    def release(self, name: str, fold: list[str] | None = None) -> None:
        """The task's exit was judged: print its held lines as they came, or, for a
        failure the launcher handled, the ``fold`` lines instead (launcher lines)."""
        with self.lock:
            _, lines = self.held.pop(name, (None, []))
        if fold is None:       # a tensor's values in the message: a line says where
            for line in fold_data(lines, "in the task's log"):
                self.print_task_line(name, line)
        elif lines:
            for line in fold:
                self.info(line)

    def holds(self, name: str) -> bool:
        """Whether a traceback of ``name`` is being held."""
        with self.lock:
            return name in self.held

    def print_task_line(self, name: str, line: str) -> None:
        with self.lock:
            write(self.out, f"[{name}] {line}\n")

    def info(self, message: str) -> None:
        with self.lock:
            write(self.err, f"tfcluster: {message}\n")

    def progress_line(self, line: str) -> None:
        """The periodic progress line (the live view draws a bar instead)."""
        self.info(line)

    def progress(self, progress: Any, tasks: list, restarts: int, silent: list | None = None,
                 state: Any = None) -> None:
        """Where training stands, on every loop turn (for the live view); ``silent``: the
        tasks that stopped answering TensorFlow's gRPC; ``state``: what is happening
        (launcher/output/progress.py's JobState)."""

    def stopping(self, names: list[str], reason: str) -> None:
        """The launcher is stopping ``names`` (for ``reason``; none: done): the live view
        says so instead of a rate and an ETA."""

    @property
    def hidden(self) -> int:
        """Lines of TensorFlow's routine output not printed (they are in the logs)."""
        return sum(f.hidden for f in self.filters.values())

    def close(self) -> None:
        """Before the closing summary: held lines are printed; the live view stops
        drawing."""
        for name in list(self.held):
            self.release(name)
