"""The console: tasks' lines on stdout with a prefix, the launcher's own on stderr."""

from __future__ import annotations

import sys
import threading
from typing import IO


class Console:
    """Thread-safe output: tasks' lines on stdout with a prefix, the launcher's on stderr."""

    def __init__(self, out: IO[str] | None = None, err: IO[str] | None = None,
                 quiet: bool = False):
        self.out = out or sys.stdout
        self.err = err or sys.stderr
        self.quiet = quiet
        self.lock = threading.Lock()

    def task_line(self, name: str, line: str) -> None:
        if self.quiet:
            return
        with self.lock:
            self.out.write(f"[{name}] {line}\n")
            self.out.flush()

    def info(self, message: str) -> None:
        with self.lock:
            self.err.write(f"tfcluster: {message}\n")
            self.err.flush()
