"""SSH backend: every task runs on its host through the system OpenSSH client (``ssh``), so
the user's ~/.ssh/config, agent and ProxyJump work as they do in a terminal.

Each host gets one master connection (ControlMaster; its socket in the run's private control
directory, closed with ``ssh -O exit``: launcher/backends/ssh_openssh.py) and one session
through it (ssh_session.py), which runs the agent (launcher/backends/agent/): the host's
check (ssh_check.py; with ssh.sync the workdir's copy first, ssh_copy.py), its storage
probes, then every task of the host. A task's argv, environment and working directory go as
one JSON line on its stdin, so no shell parses them, and no answer is awaited: a host's
tasks start in one round trip. The tasks' output and status come back in frames on that
one channel; signals go as control lines. When that stdin ends (teardown, the launcher
dies, the connection drops) the agent ends every task's process group. Hosts are connected
and checked in parallel, HOST_POOL at a time.
"""

from __future__ import annotations

import os
import random
import shlex
import threading
import time
from concurrent.futures import ThreadPoolExecutor

from launcher import gpus
from launcher.backends.agent.tasks import start_message
from launcher.backends.base import Backend, PlacesGpus, ProbeResult, TaskHandle
from launcher.backends.ssh_check import HostChecks
from launcher.backends.ssh_copy import WorkdirCopy
from launcher.backends.ssh_openssh import OpenSSH, SSHOptions, explain_ssh_error, remote_command
from launcher.backends.ssh_session import HostSession
from launcher.backends.storage_check import probe_python
from launcher.errors import PreflightError
from launcher.plan import JobPlan, TaskPlan
from launcher.spec import Timeouts

__all__ = ["SSHBackend", "SSHOptions", "HostSession", "explain_ssh_error", "remote_command"]

PORT_RANGE = (20000, 32768)   # below Linux's ephemeral range, where outgoing ports come from
HOST_POOL = 16                # hosts connected and checked at once (preflight)
HEARTBEAT = 2.0               # seconds between signs of life to every host that runs tasks
MIN_SILENCE = 10.0            # a host ends its task after this much silence, at the least


class SSHBackend(PlacesGpus, Backend):
    """Runs each task on its host over ssh: one session per host (through the host's
    master connection) for its check, its storage probes and every task of the host."""

    name = "ssh"
    OPTIONS = SSHOptions
    serves_beside_tasks = True

    def __init__(self, options: SSHOptions | None = None, *, remap: bool = False,
                 inside_job: bool = False):
        super().__init__(options if options is not None else SSHOptions(), remap=remap,
                         inside_job=inside_job)
        self.options: SSHOptions
        self.timeouts = Timeouts()        # the plan's, from preflight()
        self.openssh = OpenSSH(self.options)
        self._ports: set[tuple[str, int]] = set()
        self._random = random.SystemRandom()
        self._hosts: dict[str, HostSession] = {}          # each host's session for its tasks
        self._old: list[HostSession] = []                 # sessions replaced (a host was lost)
        self._checks: HostChecks | None = None            # what preflight found
        self._copy: WorkdirCopy | None = None             # ssh.sync
        self._heart: threading.Thread | None = None
        self._closed = threading.Event()
        self._lock = threading.Lock()

    def ssh_argv(self, host: str, command: str | None = None, master_path: str | None = None,
                 mux: bool = False) -> list[str]:
        """``ssh ... -- HOST [COMMAND]`` (launcher/backends/ssh_openssh.py)."""
        return self.openssh.argv(host, command, master_path, mux)

    def allocate_port(self, host: str) -> int:
        """A port from a range, not handed out before; a race with another program is
        caught by the job loop (the task fails to bind; new ports, start again)."""
        for _ in range(1000):
            port = self._random.randrange(*PORT_RANGE)
            if (host, port) not in self._ports:
                self._ports.add((host, port))
                return port
        raise RuntimeError(f"no free port left in {PORT_RANGE} for {host}")


    def preflight(self, plan: JobPlan) -> None:
        """Every host in parallel (HOST_POOL at once): its master connection, then one
        session that checks each task's working directory, program and explicit port there.
        One error names every failed host. The sessions stay open: each then runs its
        host's storage probes and every task of the host."""
        self.timeouts = plan.timeouts
        self._check_local_files()
        self.preflight_notes = []
        if self.options.sync:
            self._copy = WorkdirCopy(plan, self.options.sync_dir, self.options.sync == "force")
            if self._copy.note:
                self.preflight_notes.append(self._copy.note)
        self._checks = HostChecks(plan, self.options, self._copy, self._python)
        hosts: dict[str, list[TaskPlan]] = {}
        for task in plan.tasks:
            hosts.setdefault(task.host, []).append(task)
        deadline = time.monotonic() + max(self.timeouts.start,
                                          self.options.connect_timeout + 5)
        outcomes = list(CONNECT_POOL.map(lambda h: self._connect(h, hosts[h], deadline),
                                         list(hosts)))
        failures = {h: why for h, why in zip(hosts, outcomes) if why}
        if failures:
            self.close()
            lines = [f"  {host} ({', '.join(t.name for t in hosts[host])}): {why}"
                     for host, why in failures.items()]
            raise PreflightError(f"ssh preflight failed on {len(failures)} of {len(hosts)} "
                                 f"hosts; nothing was started:\n" + "\n".join(lines))
        self.preflight_notes += self._checks.notes()
        if self._copy is not None:
            self.preflight_notes.append(self._copy.line())

    def _connect(self, host: str, tasks: list[TaskPlan], deadline: float) -> str | None:
        """On a thread of CONNECT_POOL (they live as long as the process: the ssh clients'
        parent-death signal follows the thread that started them): the host's master, its
        session, its check. Why the host failed, or None."""
        assert self._checks is not None
        if self.options.multiplex:
            why = self.openssh.start_master(host, deadline)
            if why:
                return why
        session = self._session(tasks[0])
        why = self._checks.check(session, tasks, deadline,
                                 lambda command: self.openssh.session_argv(host, command))
        if why:
            session.discard()
            self.openssh.stop_master(host)
        else:
            with self._lock:
                self._hosts[host] = session
        return why

    def _check_local_files(self) -> None:
        o = self.options
        for key, path in (("identity_file", o.identity_file),
                          ("known_hosts_file", o.known_hosts_file), ("config_file", o.config_file)):
            if path and (not os.path.exists(path) or os.path.isdir(path)):
                raise PreflightError(f"ssh.{key}: file not found: {path}")

    def _python(self, task: TaskPlan) -> str:
        """The agent's interpreter: ssh.python, else the task's own Python (no PATH
        lookup through shims: it is checked before anything starts), else python3."""
        return self.options.python or probe_python(task.command)

    def remote_cwd(self, task: TaskPlan) -> str | None:
        """Where ``task`` runs on its host: in the host's copy with ssh.sync, else its cwd."""
        return task.cwd if self._copy is None else self._copy.remote_cwd(task)

    def gpu_machines(self, plan: JobPlan) -> list[gpus.Machine] | None:
        """Each host's GPUs, as its preflight check found them (None before it ran)."""
        if self._checks is None or not self._checks.gpu_answers:
            return None
        return gpus.machines_by_host(plan, self._checks.gpu_answers)

    def _description(self, task: TaskPlan) -> dict:
        return dict(start_message(task, self.remote_cwd(task)),
                    grace=self.timeouts.kill, silence=self.silence)

    @property
    def silence(self) -> float:
        """Seconds without a heartbeat after which a host ends its task by itself: the
        launcher has declared it lost by then (``timeouts.unresponsive``), so a host cut
        off from the launcher leaves no orphan, even while the link stays down."""
        return max(MIN_SILENCE, 3 * HEARTBEAT, self.timeouts.unresponsive or 30.0)

    def _beat(self) -> None:
        while not self._closed.wait(HEARTBEAT):
            with self._lock:
                sessions = list(self._hosts.values())
            for session in sessions:
                session.heartbeat()


    def _session(self, task: TaskPlan) -> HostSession:
        """A new agent on ``task``'s host, with the task's Python, through the host's
        master when it has one that is up."""
        return HostSession(task.host, self.openssh.session_argv(
            task.host, remote_command(self._python(task))))

    def start(self, task: TaskPlan) -> TaskHandle:
        """In its host's session: one line to send, no answer awaited (a new session when
        the host's ended, its host lost and back)."""
        with self._lock:
            session = self._hosts.get(task.host)
        if session is None or not session.alive:
            if session is not None:
                self._old.append(session)
            session = self._session(task)
            with self._lock:
                self._hosts[task.host] = session
        handle = session.run(task, self._description(task))
        with self._lock:
            if self._heart is None:
                self._heart = threading.Thread(target=self._beat, name="ssh-heartbeat",
                                               daemon=True)
                self._heart.start()
        return handle

    def probe(self, task: TaskPlan, argv: list[str], timeout: float) -> ProbeResult:
        """In the host's session (no new remote shell; probes there run beside each other
        and the tasks), else in a new session."""
        message = {"probe": {"argv": list(argv), "env": task.env, "cwd": self.remote_cwd(task),
                             "timeout": timeout}}
        wait = timeout + self.options.connect_timeout + 10
        with self._lock:
            session = self._hosts.get(task.host)
        if session is not None and session.alive:
            answer, other = session.ask(message, wait)
        else:
            session = self._session(task)
            answer, other = session.ask(message, wait)
            session.discard()
        if answer is None:
            return ProbeResult(124 if session.timed_out else 255,
                               "\n".join(other) or f"no answer within {timeout:.0f}s")
        return ProbeResult(answer["status"], answer["output"])

    def tunnel_command(self, host: str, port: int) -> str:
        """The ssh command that brings ``host``'s ``port`` to this machine's localhost."""
        argv = self.ssh_argv(host)
        at = argv.index("--")
        return shlex.join(argv[:at] + ["-N", "-L", f"{port}:localhost:{port}"] + argv[at:])

    def describe(self, plan: JobPlan) -> str | None:
        hosts = list(dict.fromkeys(t.host for t in plan.tasks))
        lines = ["# ssh: each host runs its tasks in one session (their argv, env and cwd go "
                 "as JSON on its stdin):"]
        first = {t.host: t for t in reversed(plan.tasks)}
        lines += [f"#   {shlex.join(self.ssh_argv(h, remote_command(self._python(first[h]))))}"
                  for h in hosts]
        if self.options.sync:
            root = os.path.abspath(plan.workdir or os.getcwd())
            lines.append(f"# ssh.sync: {root} is copied to {self.options.sync_dir}/trees/"
                         "TREE on each host before any task starts (only the files a host "
                         "lacks, by content hash); the tasks run in that copy")
        if self.options.multiplex:
            master = self.ssh_argv(hosts[0], master_path="CONTROL_DIR/SOCKET")
            lines += ["# one session per host runs all its tasks, through the host's master "
                      "connection:", f"#   {shlex.join(master)}"]
        return "\n".join(lines)

    def close(self) -> None:
        """End every host's session (its agent ends what still runs), then every master
        with ``ssh -O exit``; remove the control directory."""
        self._closed.set()
        with self._lock:
            sessions = [*self._hosts.values(), *self._old]
            self._hosts, self._old = {}, []
        for session in sessions:
            session.close_stdin()
        grace = self.timeouts.kill + 5
        list(CONNECT_POOL.map(lambda s: s.discard(grace), sessions))
        self.openssh.close(CONNECT_POOL.map)


# Threads that connect to hosts, shared by every run of this process and never ended: the
# ssh clients started there get their parent-death signal when their thread ends.
CONNECT_POOL = ThreadPoolExecutor(max_workers=HOST_POOL, thread_name_prefix="ssh-connect")

BACKEND = SSHBackend
