"""Local backend: every task is a process on this machine, in a process group of its own.

If the launcher dies, even by SIGKILL, its tasks end within seconds: each task gets
SIGTERM through PR_SET_PDEATHSIG, and a watchdog process (launcher/watchdog.py) ends the
task's whole process group, children included. A task that ends takes the rest of its
process group along.
"""

from __future__ import annotations

import ctypes
import os
import signal
import socket
import subprocess
import sys

from launcher.backends.base import Backend, ProbeResult, TaskHandle
from launcher.environment import check_local_programs
from launcher.errors import PreflightError
from launcher.tf_config import JobPlan, TaskPlan
from launcher.watchdog import Watchdog

LOCALHOST = "localhost"
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


def local_names() -> set[str]:
    """Names and addresses of this machine, found without asking DNS."""
    import psutil

    names = {"localhost", "localhost.localdomain", "ip6-localhost", "::1", "0.0.0.0",
             socket.gethostname().lower()}
    for addrs in psutil.net_if_addrs().values():
        names.update(a.address.split("%")[0].lower() for a in addrs
                     if a.family in (socket.AF_INET, socket.AF_INET6))
    return names


def check_hosts_are_local(spec) -> None:
    """PreflightError naming the first address of the spec that is not this machine."""
    names = local_names()
    entries = [(f"cluster.{job}[{i}]", a) for job, addrs in spec.cluster.items()
               for i, a in enumerate(addrs)]
    if spec.evaluator is not None:
        entries.append(("evaluator", spec.evaluator))
    for where, addr in entries:
        host = addr.host.lower()
        if host not in names and not host.startswith("127."):
            raise PreflightError(f"{where}: host {addr.host!r} is not this machine, and "
                                 "backend \"local\" runs every task here (use --local to "
                                 "map every host to localhost, or backend \"ssh\")")


class LocalHandle(TaskHandle):
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


class LocalBackend(Backend):
    """Runs the cluster on this machine: a faithful multi-process simulation."""

    name = "local"

    def __init__(self, spec, options=None):
        super().__init__(spec, options)
        self._ports: set[int] = set()
        self._watchdog: Watchdog | None = None

    def preflight(self, plan: JobPlan) -> None:
        """Before anything starts: a spec written for the local backend names only this
        machine (``--local`` maps other hosts here on purpose), and a port the spec gives
        explicitly is free here."""
        if self.spec.backend == "local":
            check_hosts_are_local(self.spec)
        check_local_programs(plan.tasks)
        for task in plan.tasks:
            if not task.auto_port and port_taken(task.port):
                raise PreflightError(f"{task.name}: port {task.port} is already in use on "
                                     "this machine (pick another port in the spec, or leave "
                                     "the port out to get a free one)")

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
        if self._watchdog is None:
            self._watchdog = Watchdog()
        proc = subprocess.Popen(
            task.command, env=task_environ(task), cwd=task.cwd, stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, start_new_session=True,
            preexec_fn=die_with_parent,
        )
        return LocalHandle(task, proc, self._watchdog)

    def close(self) -> None:
        if self._watchdog is not None:
            self._watchdog.close()
            self._watchdog = None


BACKEND = LocalBackend
