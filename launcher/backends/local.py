"""Local backend: every task is a process on this machine, in a process group of its own."""

from __future__ import annotations

import ctypes
import os
import signal
import socket
import subprocess
import sys

from launcher.backends.base import Backend, ProbeResult, TaskHandle
from launcher.tf_config import TaskPlan

LOCALHOST = "localhost"
_PR_SET_PDEATHSIG = 1


def _die_with_parent() -> None:
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


class LocalHandle(TaskHandle):
    def __init__(self, task: TaskPlan, proc: subprocess.Popen):
        self.task = task
        self.proc = proc
        self.output = proc.stdout

    def poll(self) -> int | None:
        return self.proc.poll()

    def signal(self, sig: int) -> None:
        try:
            os.killpg(self.proc.pid, sig)
        except (ProcessLookupError, PermissionError):
            pass

    @property
    def pid(self) -> int | None:
        return self.proc.pid


class LocalBackend(Backend):
    """Runs the cluster on this machine: a faithful multi-process simulation."""

    name = "local"

    def __init__(self, spec, options=None):
        super().__init__(spec, options)
        self._ports: set[int] = set()

    def host_for(self, host: str) -> str:
        return LOCALHOST

    def allocate_port(self, host: str) -> int:
        return free_port(self._ports)

    def probe(self, task: TaskPlan, argv: list[str], timeout: float) -> ProbeResult:
        try:
            done = subprocess.run(argv, env=task_environ(task), cwd=task.cwd,
                                  stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                                  stderr=subprocess.STDOUT, timeout=timeout,
                                  start_new_session=True)
        except subprocess.TimeoutExpired:
            return ProbeResult(124, f"timed out after {timeout:.0f}s")
        except OSError as e:
            return ProbeResult(127, str(e))
        return ProbeResult(done.returncode, done.stdout.decode(errors="replace"))

    def start(self, task: TaskPlan) -> TaskHandle:
        proc = subprocess.Popen(
            task.command, env=task_environ(task), cwd=task.cwd, stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, start_new_session=True,
            preexec_fn=_die_with_parent,
        )
        return LocalHandle(task, proc)


BACKEND = LocalBackend
