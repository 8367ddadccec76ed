"""Local backend: every task is a process on this machine, in a process group of its own.

If the launcher dies, even by SIGKILL, its tasks end within seconds: the run's watchdog
(launcher/backends/watchdog.py) ends every registered group and every process that carries
the run's TFCLUSTER_RUN_ID. A task that ends takes the rest of its process group along.
"""

from __future__ import annotations

import dataclasses
import os
import socket
import threading
from collections.abc import Iterable
from typing import Any

from launcher.backends.agent.probes import run_probe
from launcher.backends.agent.tasks import spawn, start_message
from launcher.backends.agent.words import refused_status, start_failure_line
from launcher.backends.base import (
    Backend,
    NotStarted,
    PlacesGpus,
    ProbeResult,
    TaskHandle,
)
from launcher.backends.environment import check_local_programs
from launcher.backends.processes import (
    ProcessHandle,
    free_port,
    port_taken,
)
from launcher.backends.watchdog import Watchdog
from launcher.checks import Address
from launcher.errors import PreflightError
from launcher.plan import RUN_ID, JobPlan, Reservation, TaskPlan

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


def check_hosts_are_local(tasks: Iterable[tuple[str, int, Address]]) -> None:
    """PreflightError naming the first (role, index, spec address) that is not this
    machine."""
    names: set[str] | None = None
    for role, index, addr in tasks:
        host = addr.host.lower()
        if host == "localhost" or host.startswith("127."):
            continue
        names = names if names is not None else local_names()   # psutil: only when needed
        if host not in names:
            where = "evaluator" if role == "evaluator" else f"cluster.{role}[{index}]"
            raise PreflightError(f"{where}: host {addr.host!r} is not this machine, and "
                                 "backend \"local\" runs every task here (use --local to "
                                 "map every host to localhost, or backend \"ssh\")")


class LocalBackend(PlacesGpus, Backend):
    """Runs the cluster on this machine: a faithful multi-process simulation."""

    name = "local"
    local_processes = True
    # tasks start off the job loop's thread (launcher/tasks.py); under load a start waits
    # for its fork and exec, and 16 threads keep 1,000 starts going where 4 let them
    # queue (docs/benchmarks.md, "Start like a shell script")
    start_threads = 16
    serves_beside_tasks = True

    def __init__(self, options: Any = None, *, remap: bool = False, inside_job: bool = False):
        super().__init__(options, remap=remap, inside_job=inside_job)
        self._hosts: tuple[tuple[str, int, Address], ...] = ()   # checked by preflight
        self._ports: set[int] = set()
        self._watchdog: Watchdog | None = None
        self._marker: str | None = None     # the run's TFCLUSTER_RUN_ID=..., for the watchdog
        self._lock = threading.Lock()       # start() runs in several threads

    def accept(self, reservation: Reservation) -> None:
        if not self.remap:
            self._hosts = reservation.tasks

    def preflight(self, plan: JobPlan) -> None:
        """Before anything starts: a spec written for the local backend names only this
        machine (``--local`` maps other hosts here on purpose), and a port the spec gives
        explicitly is free here. The tasks' watchdog starts here: its interpreter starts
        while the launcher goes on."""
        check_hosts_are_local(self._hosts)
        check_local_programs(plan.tasks, plan)
        for task in plan.tasks:
            if not task.auto_port and port_taken(task.port):
                raise PreflightError(f"{task.name}: port {task.port} is already in use on "
                                     "this machine (pick another port in the spec, or leave "
                                     "the port out to get a free one)")
        self._marker = f"{RUN_ID}={plan.run_id}"
        self._watch()       # its Python starts while the launcher takes the lease, writes state

    def _watch(self) -> Watchdog:
        """The watchdog of this run's tasks, started once."""
        with self._lock:
            if self._watchdog is None:
                self._watchdog = Watchdog(marker=self._marker)
            return self._watchdog

    def place(self, role: str, index: int, address: Address) -> Address:
        return dataclasses.replace(address, host=LOCALHOST)

    def allocate_port(self, host: str) -> int:
        return free_port(self._ports)

    def probe(self, task: TaskPlan, argv: list[str], timeout: float) -> ProbeResult:
        """Started as a task is (the agent's ``spawn``), run to its end or its timeout."""
        return ProbeResult(*run_probe(argv, task.env, task.cwd, timeout))

    def start(self, task: TaskPlan) -> TaskHandle:
        """The task's command, started by the agent's ``spawn`` as on every host, exec'd
        straight from the launcher (vfork: no parent-death function, which costs a fork of
        the launcher; the watchdog covers what it did)."""
        watchdog = self._watch()
        try:
            proc = spawn(start_message(task, task.cwd), dies_with_agent=False)
        except OSError as e:        # the kernel refused the command (the pipe is closed)
            path = task.env.get("PATH", os.environ.get("PATH"))
            line = start_failure_line(task.name, task.command, e, task.cwd, path)
            return NotStarted(task, line, refused_status(e))
        return ProcessHandle(task, proc, watchdog)

    def close(self) -> None:
        if self._watchdog is not None:
            self._watchdog.close()
            self._watchdog = None


BACKEND = LocalBackend
