"""What the launcher could not write into the run directory: a full disk, an I/O error, the
folder removed or turned read-only. The job goes on (training is in model_dir, not in the
run directory): each kind of file is said once, in one line, as it is first lost, and
again in the closing lines and summary.json (or whatever can still be written).

The task logs are the one thing that costs: their pumps keep draining the tasks' output
(a task blocked on a full pipe would hang the job) and count the lines that were dropped.
"""

from __future__ import annotations

import errno
import threading
from typing import Callable

REASONS = {
    errno.ENOSPC: "the disk is full",
    errno.EDQUOT: "the disk quota is exceeded",
    errno.EROFS: "the file system turned read-only",
    errno.ENOENT: "the run directory was removed",
    errno.EIO: "an I/O error",
    errno.EACCES: "permission denied",
}


def reason_of(error: BaseException) -> str:
    """Why a write failed, in words, with the system's own name for it."""
    if isinstance(error, OSError) and error.errno is not None:
        words = REASONS.get(error.errno)
        code = errno.errorcode.get(error.errno, str(error.errno))
        if words:
            return f"{words} ({code})"
        return f"{(error.strerror or str(error)).lower()} ({code})"
    return f"{type(error).__name__}: {error}"


class Unwritten:
    """Keeps, per file kind (``task logs``, ``events.jsonl``, ``state.json``...), the first
    reason it could not be written, and the task output lines dropped since."""

    def __init__(self, say: Callable[[str], None] | None = None):
        self.say = say
        self.reasons: dict[str, str] = {}       # kind -> why, in order of loss
        self.dropped: dict[str, int] = {}       # task -> output lines not in its log
        self.job_over = False                   # the tasks ended: nothing "goes on"
        self._lock = threading.Lock()

    def failed(self, kind: str, error: BaseException, consequence: str = "") -> None:
        """``kind`` could not be written: say so the first time, in one line."""
        with self._lock:
            if kind in self.reasons:
                return
            self.reasons[kind] = reason_of(error)
        going = "" if self.job_over else "; the job goes on (training is in model_dir)"
        if self.say is not None:
            try:
                self.say(f"{kind}: cannot write, {self.reasons[kind]}{consequence}{going}")
            except Exception:   # noqa: BLE001 - a console gone too must not stop the job
                pass

    def log_failed(self, task: str, error: BaseException) -> None:
        self.failed("task logs", error, ": task output is being dropped")
        with self._lock:
            self.dropped.setdefault(task, 0)

    def drop(self, task: str, data: bytes) -> None:
        """Output of ``task`` that its log did not get (counted in lines)."""
        with self._lock:
            self.dropped[task] = self.dropped.get(task, 0) + data.count(b"\n")

    def lines(self) -> list[str]:
        """The closing lines: what was lost, and why."""
        out = []
        for kind, why in self.reasons.items():
            if kind == "task logs":
                tasks = ", ".join(f"{t} {n} lines" for t, n in self.dropped.items())
                out.append(f"task output dropped, {why}: {tasks or 'no line lost'}")
            else:
                out.append(f"{kind} not written, {why}")
        return out

    def to_dict(self) -> dict:
        return {"reasons": dict(self.reasons), "dropped_lines": dict(self.dropped)}
