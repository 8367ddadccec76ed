"""Process helpers shared by the backends that start local processes (local, slurm's
srun steps, ssh's ssh clients): the task's environment, free ports, a process handle that
signals the whole process group, and the parent-death signal.

If the launcher dies, even by SIGKILL, its tasks end within seconds: each gets SIGTERM
through PR_SET_PDEATHSIG, and a watchdog process (launcher/watchdog.py) ends the task's
whole process group, children included.
"""

from __future__ import annotations

import ctypes
import os
import signal
import socket
import subprocess
import sys

from launcher.backends.base import TaskHandle
from launcher.plan import TaskPlan
from launcher.watchdog import Watchdog

_PR_SET_PDEATHSIG = 1


def die_with_parent() -> None:
    """In the child, before exec: get SIGTERM when the launcher dies, even by SIGKILL."""
    if sys.platform.startswith("linux"):
        try:
            ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_PDEATHSIG, signal.SIGTERM)
        except OSError:
            pass


def free_port(taken: set[int] | None = None, attempts: int = 50) -> int:
    """A port free on every interface (TensorFlow's server binds *:PORT), not in ``taken``."""
    taken = taken if taken is not None else set()
    for _ in range(attempts):
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
            s.bind(("", 0))
            port = s.getsockname()[1]
        if port not in taken:
            taken.add(port)
            return port
    raise RuntimeError("no free port found")


def task_environ(task: TaskPlan) -> dict[str, str]:
    env = dict(os.environ)
    env.update(task.env)
    return env


def port_taken(port: int) -> bool:
    """True when binding *:PORT fails here (what TensorFlow's server would do)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind(("", port))
        except OSError:
            return True
    return False


class ProcessHandle(TaskHandle):
    """A task that is a local process, leading a process group of its own."""

    def __init__(self, task: TaskPlan, proc: subprocess.Popen, watchdog: Watchdog | None = None):
        self.task = task
        self.proc = proc
        self.output = proc.stdout
        self.watchdog = watchdog
        if watchdog is not None:
            watchdog.watch(proc.pid)

    def poll(self) -> int | None:
        status = self.proc.poll()
        if status is not None and self.watchdog is not None:
            self.signal(signal.SIGKILL)     # children left behind in its group
            self.watchdog.forget(self.proc.pid)
            self.watchdog = None
        return status

    def signal(self, sig: int) -> None:
        try:
            os.killpg(self.proc.pid, sig)
        except (ProcessLookupError, PermissionError):
            pass

    @property
    def pid(self) -> int | None:
        return self.proc.pid
