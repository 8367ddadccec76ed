"""Local backend: every task is a process on this machine, in a process group of its own.

If the launcher dies, even by SIGKILL, its tasks end within seconds (launcher/processes.py).
A task that ends takes the rest of its process group along.
"""

from __future__ import annotations

import socket
import subprocess

from launcher.backends.base import Backend, ProbeResult, TaskHandle
from launcher.environment import check_local_programs
from launcher.errors import PreflightError
from launcher.plan import JobPlan, TaskPlan
from launcher.processes import ProcessHandle, die_with_parent, free_port, port_taken, task_environ
from launcher.watchdog import Watchdog

LOCALHOST = "localhost"


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
    names: set[str] | None = None
    entries = [(f"cluster.{job}[{i}]", a) for job, addrs in spec.cluster.items()
               for i, a in enumerate(addrs)]
    if spec.evaluator is not None:
        entries.append(("evaluator", spec.evaluator))
    for where, addr in entries:
        host = addr.host.lower()
        if host == "localhost" or host.startswith("127."):
            continue
        names = names if names is not None else local_names()   # psutil: only when needed
        if host not in names:
            raise PreflightError(f"{where}: host {addr.host!r} is not this machine, and "
                                 "backend \"local\" runs every task here (use --local to "
                                 "map every host to localhost, or backend \"ssh\")")


class LocalBackend(Backend):
    """Runs the cluster on this machine: a faithful multi-process simulation."""

    name = "local"
    local_processes = True

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
        return ProcessHandle(task, proc, self._watchdog)

    def close(self) -> None:
        if self._watchdog is not None:
            self._watchdog.close()
            self._watchdog = None


BACKEND = LocalBackend
