"""Process helpers shared by the backends that start local processes (local, slurm's
srun steps, ssh's ssh clients): the task's environment, free ports, a process handle that
signals the whole process group, and the parent-death signal. ``port_taken`` is the agent's
own (launcher/backends/agent/probes.py): one check of a port, here and there.

If the launcher dies, even by SIGKILL, what it started ends within seconds: a watchdog
process (launcher/backends/watchdog.py) ends every registered process group and, for local
tasks, every process carrying the run's TFCLUSTER_RUN_ID.

The few client processes of the other backends (ssh, srun, docker) also get SIGTERM
through PR_SET_PDEATHSIG, set by util-linux's ``setpriv`` in front of the program
(``dies_with_parent``), not by a ``preexec_fn``: a ``preexec_fn`` runs Python in the child,
so ``subprocess`` must fork the whole launcher (hundreds of pump threads, tens of MB) rather
than vfork; that cost ~30 ms a start against ~2 ms (docs/benchmarks.md, "Scale"). Local
tasks do without it: its exec, a second dynamic loader per task, was ~2 ms of CPU a task
at 1,000 tasks (docs/benchmarks.md, "Start like a shell script").
"""

from __future__ import annotations

import functools
import os
import shutil
import signal
import socket
import subprocess
import sys

from launcher.backends.agent.probes import port_taken as port_taken
from launcher.backends.base import TaskHandle
from launcher.backends.watchdog import Watchdog
from launcher.plan import TaskPlan


@functools.lru_cache(maxsize=1)
def _setpriv() -> str | None:
    """util-linux's setpriv, when it can set the parent-death signal."""
    if not sys.platform.startswith("linux"):
        return None
    path = shutil.which("setpriv")
    if path is None:
        return None
    try:
        done = subprocess.run([path, "--pdeathsig", "TERM", "--", "true"],
                              stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                              stderr=subprocess.DEVNULL, timeout=10)
    except (OSError, subprocess.SubprocessError):
        return None
    return path if done.returncode == 0 else None


def dies_with_parent(argv: list[str], env: dict[str, str] | None = None) -> list[str]:
    """``argv`` as a command that gets SIGTERM when the launcher's thread that starts it
    ends, even by SIGKILL (``setpriv --pdeathsig TERM -- argv``, one exec). Start tasks from
    threads that live as long as the run. Without setpriv, ``argv`` as is: the watchdog
    alone covers the tasks. FileNotFoundError, as Popen raises it, when ``argv[0]`` is not
    found on ``env``'s PATH."""
    setpriv = _setpriv()
    if setpriv is None:
        return list(argv)
    program = argv[0]
    path = (env if env is not None else os.environ).get("PATH", os.defpath)
    if os.sep not in program and not _found(program, path):
        raise FileNotFoundError(2, "No such file or directory", program)
    return [setpriv, "--pdeathsig", "TERM", "--", *argv]


_FOUND: set[tuple[str, str]] = set()     # (program, PATH) found once: hundreds of tasks


def _found(program: str, path: str) -> bool:
    """Whether ``program`` is on ``path``; a program found once is not looked up again
    (every task of a role runs the same one)."""
    if (program, path) in _FOUND:
        return True
    if shutil.which(program, path=path) is None:
        return False
    _FOUND.add((program, path))
    return True


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
