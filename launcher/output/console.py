"""The console: tasks' lines on stdout with a prefix, the launcher's own on stderr.

TensorFlow's routine output (deprecation notices, banners, INFO chatter: launcher/output/
noise.py) is kept in the task logs but not printed unless ``verbose``; a ``\\r``-redrawn
progress bar is printed as its latest state. On a terminal, ``make_console``
(launcher/output/terminal.py) gives the live view instead (launcher/output/live.py)."""

from __future__ import annotations

import sys
import threading
from typing import IO, Any

from launcher.output.noise import NoiseFilter, latest_state
from launcher.output.pipes import write


class Console:
    """Thread-safe output: tasks' lines on stdout with a prefix, the launcher's on stderr."""

    def __init__(self, out: IO[str] | None = None, err: IO[str] | None = None,
                 quiet: bool = False, verbose: bool = False):
        self.out = out or sys.stdout
        self.err = err or sys.stderr
        self.quiet = quiet
        self.verbose = verbose
        self.lock = threading.Lock()
        self.filters: dict[str, NoiseFilter] = {}

    def shows(self, name: str, line: str) -> str | None:
        """The line as the console prints it, or None when it is not printed."""
        if self.quiet:
            return None
        line = latest_state(line)
        if self.verbose:
            return line
        with self.lock:
            keep = self.filters.setdefault(name, NoiseFilter()).show(line)
        return line if keep else None

    def task_line(self, name: str, line: str) -> None:
        shown = self.shows(name, line)
        if shown is None:
            return
        with self.lock:
            write(self.out, f"[{name}] {shown}\n")

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

    @property
    def hidden(self) -> int:
        """Lines of TensorFlow's routine output not printed (they are in the logs)."""
        return sum(f.hidden for f in self.filters.values())

    def close(self) -> None:
        """Before the closing summary: the live view stops drawing."""
