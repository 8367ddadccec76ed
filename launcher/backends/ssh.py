"""SSH backend: every task runs on its host through the system OpenSSH client (``ssh``), so
the user's ~/.ssh/config, agent and ProxyJump work as they do in a terminal.

Each host gets one master connection (ControlMaster; its socket in the run's private control
directory, closed with ``ssh -O exit``) and one session through it, which runs a small
bootstrap (launcher/backends/remote_bootstrap.py): the host's check, its storage probes,
then every task of the host. A task's argv, environment and working directory go as one
JSON line on its stdin, so no shell parses them, and no answer is awaited: a host's tasks
start in one round trip. The tasks' output and status come back in frames on that one
channel; signals go as control lines. When that stdin ends (teardown, the launcher dies,
the connection drops) the bootstrap ends every task's process group. Hosts are connected
and checked in parallel, HOST_POOL at a time.
"""

from __future__ import annotations

import contextlib
import glob
import itertools
import json
import math
import os
import random
import secrets
import shlex
import shutil
import signal
import subprocess
import tempfile
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any, cast

import psutil

from launcher import gpus
from launcher.backends import remote_bootstrap, workdir_sync
from launcher.backends.base import Backend, PlacesGpus, ProbeResult, RelayedOutput, TaskHandle
from launcher.backends.environment import check_item
from launcher.backends.options import option
from launcher.backends.processes import dies_with_parent
from launcher.backends.storage_check import probe_python
from launcher.checks import expect_str
from launcher.errors import PreflightError, SpecError
from launcher.plan import JobPlan, TaskPlan
from orchestrator.policies import HOST_LOST

# OpenSSH options the backend sets itself or that have their own key in the ssh section.
RESERVED = {"batchmode": "", "stricthostkeychecking": "strict_host_key_checking",
            "userknownhostsfile": "known_hosts_file", "connecttimeout": "connect_timeout",
            "identityfile": "identity_file", "user": "user", "port": "port",
            "controlmaster": "multiplex", "controlpath": "multiplex",
            "controlpersist": "multiplex", "requesttty": ""}
PORT_RANGE = (20000, 32768)   # below Linux's ephemeral range, where outgoing ports come from
HOST_POOL = 16                # hosts connected and checked at once (preflight)
KILL_LOCAL_AFTER = 3.0        # after SIGKILL: end the local ssh if the remote is silent
HEARTBEAT = 2.0               # seconds between signs of life to every host that runs tasks
MIN_SILENCE = 10.0            # a host ends its task after this much silence, at the least
BOOTSTRAP_SOURCE = Path(remote_bootstrap.__file__).read_text(encoding="utf-8")


def _user_name(value: str, where: str) -> str:
    if value.startswith("-") or "@" in value:
        raise SpecError(where, f"{value!r} is not a user name")
    return value


def _openssh_options(extra: dict[str, Any], where: str) -> dict[str, str]:
    clean = {}
    for name, value in extra.items():
        at = f"{where}.{name}"
        if not name.isalnum():
            raise SpecError(at, "is not an OpenSSH option name (letters and digits)")
        if name.lower() in RESERVED:
            own = RESERVED[name.lower()]
            why = f"use {where.rsplit('.', 1)[0]}.{own}" if own else "it cannot be changed"
            raise SpecError(at, f"set by tfcluster; {why}")
        if isinstance(value, bool):
            value = "yes" if value else "no"
        elif isinstance(value, int):
            value = str(value)
        value = expect_str(value, at)
        if "\n" in value or "\x00" in value:
            raise SpecError(at, "must be one line")
        clean[name] = value
    return clean


@dataclass(frozen=True)
class SSHOptions:
    """The spec's ``ssh`` section."""

    user: str | None = option(None, "str", check=_user_name, doc="remote user name")
    port: int | None = option(None, "int", maximum=65535, doc="sshd port of every host")
    identity_file: str | None = option(None, "path", doc="private key file")
    known_hosts_file: str | None = option(None, "path", doc="known_hosts file")
    strict_host_key_checking: bool | str = option(
        True, "choice", choices=(True, False, "accept-new"),
        message='must be true, false or "accept-new"', doc="host-key checking (on by default)")
    connect_timeout: float = option(10.0, "number", minimum=1, doc="seconds to connect")
    config_file: str | None = option(None, "path", doc="an ssh_config file")
    options: dict[str, str] = option({}, "map", check=_openssh_options,
                                     doc="more OpenSSH options (-o NAME=VALUE)")
    python: str | None = option(None, "str", doc="the remote bootstrap's interpreter")
    multiplex: bool = option(True, "bool", doc="a master connection (ControlMaster) per host")
    sync: bool | str = option(
        False, "choice", choices=(False, True, "force"), message='must be true, false or "force"',
        doc="copy the workdir to every host before any task starts (\"force\": above the "
            "size limit too)")
    sync_dir: str = option("~/.cache/tfcluster/sync", "str",
                           doc="where each host keeps the copies (relative: to the login "
                               "directory)")



def _ssh_path(path: str) -> str:
    """A path as an OpenSSH option value: '%' is a token there, whitespace splits words."""
    path = path.replace("%", "%%")
    return f'"{path}"' if any(c.isspace() for c in path) else path


def remote_command(python: str) -> str:
    """What the remote shell runs: the bootstrap stub (isolated, no site-packages: it needs
    only the standard library). Nothing of the task is in it."""
    return f"exec {shlex.quote(python)} -I -S -c {shlex.quote(remote_bootstrap.STUB)}"


def explain_ssh_error(text: str, options: SSHOptions) -> str:
    """One line from ssh's stderr that says what went wrong, in words a user can act on."""
    lines = [ln.strip() for ln in text.splitlines()
             if ln.strip() and not ln.startswith("@") and not ln.startswith("Warning:")]
    known = options.known_hosts_file or "~/.ssh/known_hosts"
    if "REMOTE HOST IDENTIFICATION HAS CHANGED" in text:
        return (f"host key verification failed: the host's key does not match the one in "
                f"{known} (possible impostor; if the host was reinstalled, update that file)")
    if "host key is known" in text or "Host key verification failed" in text:
        return (f"host key verification failed: no key for this host in {known} (add it, "
                f"e.g. with ssh-keyscan, or set ssh.strict_host_key_checking to "
                f"\"accept-new\")")
    if "Permission denied" in text:
        line = next((ln for ln in lines if "Permission denied" in ln), "Permission denied")
        return f"authentication failed ({line}): check ssh.user and ssh.identity_file"
    for marker in ("Connection refused", "No route to host", "timed out",
                   "Could not resolve hostname", "Network is unreachable",
                   "Connection closed", "Connection reset"):
        for ln in lines:
            if marker in ln:
                return f"cannot connect: {ln}"
    return lines[-1] if lines else "ssh failed without a message"


def _remove_stale_control_dirs(base: str) -> None:
    """Control directories of launchers that died without cleaning up (SIGKILL)."""
    for path in glob.glob(os.path.join(base, "tfc-ssh-*-*")):
        pid = os.path.basename(path).split("-")[2]
        if pid.isdigit() and not psutil.pid_exists(int(pid)):
            shutil.rmtree(path, ignore_errors=True)


@dataclass
class _Master:
    """A host's master connection (ControlMaster): every session to that host goes through
    it; ``ssh -O exit`` closes it."""

    proc: subprocess.Popen
    path: str
    log: IO[bytes]

    @property
    def ready(self) -> bool:
        return self.proc.poll() is None and os.path.exists(self.path)


class HostSession:
    """One bootstrap on a host, through ``ssh``: the host's check, its probes (each answered
    by one JSON line; probes run at once, beside each other and the tasks), and every task
    of the host. A task starts with one line on stdin (no answer awaited); stdout brings
    back frames of the tasks' output and status lines (launcher/backends/remote_bootstrap.py),
    which one reader hands to each task's handle and each question's asker. ssh's own
    messages on stderr go into every running task's output."""

    def __init__(self, host: str, argv: list[str]):
        self.host = host
        self.nonce = secrets.token_hex(8)
        self.handles: dict[str, SSHHandle] = {}   # task id -> its handle, output open or not
        self.timed_out = False                    # a question got no answer in time
        self.said: list[str] = []                 # ssh's lines on stderr (the last 50)
        self.last_heard = time.monotonic()        # the bootstrap's last word
        self.stray: list[str] = []                # stdout lines not the bootstrap's (last 50)
        self._ids = itertools.count()
        self._asked: dict[str, list] = {}         # question's nonce -> [Event, answer]
        self._lock = threading.Lock()             # stdin
        self._route = threading.Lock()            # the handles' pipes, the questions
        self.proc = subprocess.Popen(dies_with_parent(argv), stdin=subprocess.PIPE,
                                     stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                     start_new_session=True)
        self._stdin, self._stdout, self._stderr = (cast(IO[bytes], s) for s in (
            self.proc.stdin, self.proc.stdout, self.proc.stderr))
        self._errors = threading.Thread(target=self._read_stderr, name=f"ssh-err-{host}",
                                        daemon=True)
        self._errors.start()
        self._demux = threading.Thread(target=self._read_stdout, name=f"ssh-{host}",
                                       daemon=True)
        self._demux.start()
        self.send((json.dumps(BOOTSTRAP_SOURCE) + "\n").encode())

    @property
    def alive(self) -> bool:
        return self.proc.poll() is None

    @property
    def running(self) -> bool:
        """Tasks were started in it."""
        return bool(self.handles)

    def send(self, data: bytes) -> bool:
        with self._lock:
            try:
                self._stdin.write(data)
                self._stdin.flush()
                return True
            except (OSError, ValueError):
                return False

    def _message(self, message: dict) -> bool:
        return self.send((json.dumps(dict(message, nonce=self.nonce)) + "\n").encode())

    def ask(self, message: dict, timeout: float) -> tuple[dict | None, list[str]]:
        """Send a check or probe; its answer (None when none came in ``timeout`` s: then a
        session that runs no task yet is killed) and the stray lines seen so far."""
        nonce = f"{self.nonce}-q{next(self._ids)}"
        waiting: list = [threading.Event(), None]
        with self._route:
            self._asked[nonce] = waiting
        if self.alive and self.send((json.dumps(dict(message, nonce=nonce)) + "\n").encode()):
            waiting[0].wait(timeout)
        with self._route:
            self._asked.pop(nonce, None)
        if waiting[1] is None and not waiting[0].is_set():
            self.timed_out = True
            if not self.running:
                self.proc.kill()
        return waiting[1], list(self.stray)

    def run(self, task: TaskPlan, desc: dict) -> SSHHandle:
        """Start ``task`` in this session: one line on stdin, no answer awaited."""
        handle = SSHHandle(self, str(next(self._ids)), task)
        with self._route:
            self.handles[handle.id] = handle
        self._message(dict(desc, run=handle.id))
        return handle

    def _read_stdout(self) -> None:
        """The bootstrap's stdout: answers to questions, the tasks' output and status."""
        head = self.nonce.encode() + b" "
        try:
            for line in iter(self._stdout.readline, b""):
                self.last_heard = time.monotonic()
                if line.startswith(head):
                    kind, _, rest = line[len(head):].rstrip(b"\n").partition(b" ")
                    if kind == b"out":
                        task_id, _, size = rest.partition(b" ")
                        data = self._stdout.read(int(size))
                        self._to_task(task_id.decode(), data)
                    elif kind == b"status":
                        self._status(json.loads(rest))
                elif not (line.startswith(b"{") and self._answer(line)):
                    self._stray(line)     # not the bootstrap's (a login script's echo)
        except (OSError, ValueError):
            pass
        finally:
            lost = self._lost_line()
            with self._route:
                for handle in self.handles.values():
                    if lost and handle.exit is None:
                        handle.relay.write(lost)
                    handle.relay.close()
                for waiting in self._asked.values():
                    waiting[0].set()

    def _lost_line(self) -> bytes | None:
        """When ssh itself failed (exit status 255: the host stopped answering, its
        keepalive timed out) under running tasks: the line their output ends with, a
        loss the restart policies retry (orchestrator.policies.TRANSIENT_ERRORS)."""
        try:
            code = self.proc.wait(timeout=5)
        except subprocess.TimeoutExpired:
            return None
        if code != 255 or not self.handles:
            return None
        self._errors.join(2)
        why = self.said[-1] if self.said else "ssh exited with status 255"
        return f"{HOST_LOST}{self.host} ({why})\n".encode()

    def _answer(self, line: bytes) -> bool:
        try:
            answer = json.loads(line)
        except ValueError:
            return False
        with self._route:
            waiting = self._asked.get(str(answer.get("nonce"))) if isinstance(answer, dict) \
                else None
        if waiting is None:
            return False
        waiting[1] = answer
        waiting[0].set()
        return True

    def _stray(self, line: bytes) -> None:
        self.stray = [*self.stray[-49:], line.decode(errors="replace").rstrip("\r\n")]
        self._to_all(line)

    def _status(self, status: dict) -> None:
        handle = self.handles.get(str(status.get("task")))
        if handle is None:
            return
        if "started" in status:
            handle.remote_pid = status["started"]
        if "refused" in status:
            handle.start_failure = str(status["refused"])
        if "exit" in status:
            handle.exit = status["exit"]

    def _to_task(self, task_id: str, data: bytes) -> None:
        with self._route:
            handle = self.handles.get(task_id)
            if handle is not None:
                if data:
                    handle.relay.write(data)
                else:
                    handle.relay.close()

    def drop(self, task_id: str) -> None:
        """Stop routing output to a task given up here; its output ends."""
        with self._route:
            handle = self.handles.pop(task_id, None)
            if handle is not None:
                handle.relay.close()

    def _to_all(self, line: bytes) -> None:
        with self._route:
            for handle in self.handles.values():
                handle.relay.write(line)

    def _read_stderr(self) -> None:
        """ssh's own messages (and the remote shell's): kept, and shown in every running
        task's output."""
        try:
            for line in iter(self._stderr.readline, b""):
                self.said = [*self.said[-49:], line.decode(errors="replace").rstrip("\r\n")]
                self._to_all(line)
        finally:
            self._stderr.close()

    def heartbeat(self) -> None:
        """A sign of life for the bootstrap (control line 0), which answers it."""
        if self.running and self.alive:
            self.send(b"0\n")

    def signal(self, task_id: str, sig: int) -> None:
        self.send(f"{task_id} {int(sig)}\n".encode())

    def kill(self) -> None:
        """End the local ssh (the host no longer answers); the bootstrap there ends its tasks
        when it sees its stdin end, or hears nothing for ``silence`` s."""
        if self.alive:
            self.proc.kill()

    def close_stdin(self) -> None:
        """End of stdin: the bootstrap ends every task's group (SIGTERM, then SIGKILL), or
        exits when it runs none."""
        with self._lock:
            try:
                self._stdin.close()
            except OSError:
                pass

    def ended(self, timeout: float = 5.0) -> int | None:
        """ssh's exit status once it ended and its output was read to the end, else None."""
        code = self.proc.poll()
        if code is None:
            return None
        for thread in (self._demux, self._errors):
            if thread is not None:
                thread.join(timeout)
        return code

    def discard(self, timeout: float = 5.0) -> None:
        """End a session (it runs nothing, or its tasks are done): close it, wait for ssh."""
        self.close_stdin()
        try:
            self.proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        self.ended()
        self._stdout.close()


class SSHHandle(TaskHandle):
    """One task in its host's session: its output (a pipe that session fills), its exit
    status, and signals by control line."""

    def __init__(self, session: HostSession, task_id: str, task: TaskPlan):
        self.session = session
        self.id = task_id
        self.task = task
        self.remote_pid: int | None = None
        self.exit: int | None = None
        self.given_up = False        # SIGKILL had no effect on a host that still answers
        self.relay = RelayedOutput()     # the session's reader passes the task's output on
        self.output = self.relay.output

    def poll(self) -> int | None:
        if self.exit is not None:
            return self.exit
        if self.given_up:
            return -signal.SIGKILL
        code = self.session.ended()
        if code is None:
            return None
        if self.exit is None and self.remote_pid is None and code in (126, 127) and \
                self.start_failure is None:
            said = self.session.said[-1] if self.session.said else "no message"
            self.start_failure = (f"{self.task.name}: cannot start the bootstrap's Python on "
                                  f"{self.session.host}: the remote shell said (exit status "
                                  f"{code}): {said}")
        return self.exit if self.exit is not None else code

    def signal(self, sig: int) -> None:
        if self.poll() is not None:
            return
        sent = time.monotonic()
        self.session.signal(self.id, sig)
        if sig == signal.SIGKILL:
            self.session.send(b"0\n")     # answered at once by a host that is there
            timer = threading.Timer(KILL_LOCAL_AFTER, self._after_kill, args=(sent,))
            timer.daemon = True
            timer.start()

    def _after_kill(self, sent: float) -> None:
        """Still running, KILL_LOCAL_AFTER s after SIGKILL: when the host said nothing since
        (not even to the sign of life sent with it), end the local ssh (the bootstrap there
        ends what it runs); else the task cannot be killed there: given up here."""
        if self.poll() is not None:
            return
        if self.session.last_heard < sent:
            self.session.kill()
        else:
            self.given_up = True
            self.session.drop(self.id)

    @property
    def pid(self) -> int | None:
        return self.session.proc.pid


class SSHBackend(PlacesGpus, Backend):
    """Runs each task on its host over ssh: one remote shell per host for its check, its
    storage probes and its first task; a master connection for hosts with several tasks."""

    name = "ssh"
    OPTIONS = SSHOptions
    serves_beside_tasks = True

    def __init__(self, options: SSHOptions | None = None, *, remap: bool = False,
                 inside_job: bool = False):
        super().__init__(options if options is not None else SSHOptions(), remap=remap,
                         inside_job=inside_job)
        self.options: SSHOptions
        self.timeouts: dict[str, float] = {}        # the plan's, from preflight()
        self._ports: set[tuple[str, int]] = set()
        self._random = random.SystemRandom()
        self._control_dir: str | None = None
        self._masters: dict[str, _Master] = {}
        self._hosts: dict[str, HostSession] = {}          # each host's session for its tasks
        self._old: list[HostSession] = []                 # sessions replaced (a host was lost)
        self._gpu_answers: dict[str, Any] | None = None   # host -> nvidia-smi's, preflight
        self._heart: threading.Thread | None = None
        self._closed = threading.Event()
        self._lock = threading.Lock()
        self._copy: workdir_sync.Manifest | None = None   # ssh.sync: the workdir's manifest
        self._roots: dict[str, str] = {}                  # host -> its copy's root
        self.sent: dict[str, int] = {}                    # host -> bytes of files sent
        self.found_tensorflow: dict[str, dict[str, str]] = {}  # host -> task -> version
        self._plan: JobPlan | None = None

    # ------------------------------------------------------------------ ssh command lines
    def ssh_argv(self, host: str, command: str | None = None, master_path: str | None = None,
                 mux: bool = False) -> list[str]:
        """``ssh ... -- HOST [COMMAND]``; with ``master_path``: the host's master connection;
        with ``mux``: a session through that master."""
        o = self.options
        argv = ["ssh"]
        if o.config_file:
            argv += ["-F", o.config_file]
        for name, value in o.options.items():   # the user's first: the first value wins
            argv += ["-o", f"{name}={value}"]
        words: dict[bool | str, str] = {True: "yes", False: "no"}
        check = words.get(o.strict_host_key_checking, "accept-new")
        argv += ["-T", "-e", "none", "-o", "BatchMode=yes",
                 "-o", f"ConnectTimeout={math.ceil(o.connect_timeout)}",
                 "-o", f"StrictHostKeyChecking={check}",
                 "-o", "ServerAliveInterval=10", "-o", "ServerAliveCountMax=3"]
        if o.known_hosts_file:
            argv += ["-o", f"UserKnownHostsFile={_ssh_path(o.known_hosts_file)}"]
        elif o.strict_host_key_checking is False:
            argv += ["-o", "UserKnownHostsFile=/dev/null"]
        if o.identity_file:
            argv += ["-i", o.identity_file.replace("%", "%%"), "-o", "IdentitiesOnly=yes"]
        if o.port:
            argv += ["-p", str(o.port)]
        if o.user:
            argv += ["-l", o.user]
        if master_path is not None:
            argv += ["-M", "-N", "-o", "ControlPersist=no",
                     "-o", f"ControlPath={_ssh_path(master_path)}"]
        elif mux:
            argv += ["-o", "ControlMaster=no",
                     "-o", f"ControlPath={_ssh_path(self._masters[host].path)}"]
        argv += ["--", host]
        if command is not None:
            argv.append(command)
        return argv

    def _new_control_path(self) -> str:
        if self._control_dir is None:
            base = "/tmp" if os.path.isdir("/tmp") else tempfile.gettempdir()  # sockets: short
            _remove_stale_control_dirs(base)
            self._control_dir = tempfile.mkdtemp(prefix=f"tfc-ssh-{os.getpid()}-", dir=base)
        return os.path.join(self._control_dir, secrets.token_hex(4))

    # ------------------------------------------------------------------ the interface
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
        self.timeouts = dict(plan.timeouts)
        self._check_local_files()
        self.preflight_notes = []
        self._plan = plan
        if self.options.sync:
            self._prepare_copy(plan)
        hosts: dict[str, list[TaskPlan]] = {}
        for task in plan.tasks:
            hosts.setdefault(task.host, []).append(task)
        deadline = time.monotonic() + max(self.timeouts.get("start", 60.0),
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
        self.preflight_notes += tensorflow_notes(self.found_tensorflow)
        if self._copy is not None:
            self.preflight_notes.append(sync_line(self._copy, self.sent))

    def _connect(self, host: str, tasks: list[TaskPlan], deadline: float) -> str | None:
        """On a thread of CONNECT_POOL (they live as long as the process: the ssh clients'
        parent-death signal follows the thread that started them): the host's master, its
        session, its check. Why the host failed, or None."""
        if self.options.multiplex:
            why = self._start_master(host, deadline)
            if why:
                return why
        session = self._session(tasks[0])
        why = self._check(session, tasks, deadline)
        if why:
            session.discard()
            self._stop_master(host)
        else:
            with self._lock:
                self._hosts[host] = session
        return why

    def _check_local_files(self) -> None:
        o = self.options
        for key in ("identity_file", "known_hosts_file", "config_file"):
            path = getattr(o, key)
            if path and (not os.path.exists(path) or os.path.isdir(path)):
                raise PreflightError(f"ssh.{key}: file not found: {path}")

    def _start_master(self, host: str, deadline: float) -> str | None:
        """Start ``host``'s master connection and wait until it is up; why it failed."""
        with self._lock:
            path = self._new_control_path()
        log = tempfile.TemporaryFile()  # noqa: SIM115 - closed with the master
        proc = subprocess.Popen(dies_with_parent(self.ssh_argv(host, master_path=path)),
                                stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                                stderr=log, start_new_session=True)
        master = _Master(proc, path, log)
        with self._lock:
            self._masters[host] = master
        while not master.ready:
            if proc.poll() is not None:
                log.seek(0)
                why = explain_ssh_error(log.read().decode(errors="replace"), self.options)
                break
            if time.monotonic() > deadline:
                why = "no connection in time (timeouts.start)"
                break
            time.sleep(0.01)
        else:
            return None
        self._stop_master(host)
        return why

    def _python(self, task: TaskPlan) -> str:
        """The bootstrap's interpreter: ssh.python, else the task's own Python (no PATH
        lookup through shims: it is checked before anything starts), else python3."""
        return self.options.python or probe_python(task.command)

    def _check(self, session: HostSession, tasks: list[TaskPlan], deadline: float) -> str | None:
        """Why the host failed its check, or None. With ssh.sync the check first finds the
        workdir's copy there (one round trip when the host has it); else the files the host
        lacks go through the master connection (tar), and the copy is built there before
        the check runs in it."""
        items = [self._check_item(t) for t in tasks]
        message: dict[str, Any] = {"check": items, "gpu_query": gpus.QUERY}
        copy = self._copy
        if copy is not None:
            message["sync"] = {"area": self.options.sync_dir, "tree": copy.tree,
                               "objects": list(copy.sizes)}
        answer, other = session.ask(message, max(1.0, deadline - time.monotonic()))
        if answer is not None and copy is not None and not (answer.get("sync") or {}).get("root"):
            why = self._send_copy(session, copy, answer["sync"], tasks[0].host)
            if why:
                return why
            message = {"check": items, "gpu_query": gpus.QUERY, "install": {
                "area": self.options.sync_dir, "tree": copy.tree, "entries": copy.entries,
                "incoming": answer["sync"]["incoming"]}}
            answer, other = session.ask(message, max(30.0, deadline - time.monotonic()))
            if answer is not None and not (answer.get("sync") or {}).get("root"):
                return (f"ssh.sync: {answer['sync'].get('problem')}; nothing of the copy is "
                        "used")
        if answer is not None:
            self._keep_answer(tasks[0].host, answer)
            return "; ".join(answer["problems"]) or None
        return self._why_no_answer(session, tasks[0], other)

    def _keep_answer(self, host: str, answer: dict[str, Any]) -> None:
        """What the host's check found: its GPUs, its TensorFlow, its copy of the workdir."""
        with self._lock:
            self._gpu_answers = {**(self._gpu_answers or {}), host: answer.get("gpus")}
            self.found_tensorflow[host] = answer.get("tensorflow") or {}
            if self._copy is not None:
                self._roots[host] = answer["sync"]["root"]
                self.sent.setdefault(host, 0)

    def _why_no_answer(self, session: HostSession, task: TaskPlan, other: list[str]) -> str:
        """The check gave no answer: out of time, ssh's own failure (exit status 255), no
        Python to run it, or its last line."""
        if session.timed_out:
            return "no answer to the check in time (timeouts.start)"
        session.close_stdin()
        try:
            status = session.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            session.proc.kill()
            status = session.proc.wait()
        session.ended()
        other += session.said
        if status == 255:
            return explain_ssh_error("\n".join(other), self.options)
        if status in (126, 127):
            source = "ssh.python" if self.options.python else "the task's Python"
            return (f"{self._python(task)} ({source}) cannot run on this host (exit "
                    f"status {status}): Python 3 is needed there to start the tasks")
        lines = [ln for ln in other if ln.strip()]
        return (f"the check did not run (exit status {status}): "
                f"{lines[-1] if lines else 'no output'}")

    def _check_item(self, task: TaskPlan) -> dict[str, Any]:
        """What the host checks of ``task`` (launcher/backends/environment.py); with
        ssh.sync, in the host's copy of the workdir."""
        item = check_item(task, self._plan, ' (ssh.sync copies the workdir to every host: '
                                            '"ssh": {"sync": true})')
        if self._copy is not None:
            item.update(cwd=None, in_tree=self._in_tree(task), hint=(
                " (ssh.sync copied the workdir there: is it left out by "
                f"{workdir_sync.IGNORE_FILE}, or outside the workdir?)"))
        return item

    def _in_tree(self, task: TaskPlan) -> str:
        """``task``'s working directory relative to the synced workdir."""
        assert self._copy is not None
        local = os.path.abspath(task.cwd or self._copy.root)
        return os.path.relpath(local, self._copy.root)

    def remote_cwd(self, task: TaskPlan) -> str | None:
        """Where ``task`` runs on its host: in the host's copy with ssh.sync, else its cwd."""
        root = self._roots.get(task.host)
        if self._copy is None or root is None:
            return task.cwd
        return os.path.normpath(os.path.join(root, self._in_tree(task)))

    def _prepare_copy(self, plan: JobPlan) -> None:
        """ssh.sync: the workdir's manifest (PreflightError: missing, unreadable, a symlink
        out of it, too large); each task's directory must lie inside it."""
        root = os.path.abspath(plan.workdir or os.getcwd())
        leave_out = tuple(p for p in (plan.run_dir, _local_path(plan.storage.url)) if p)
        copy = workdir_sync.manifest(root, leave_out)
        note = workdir_sync.size_check(copy, force=self.options.sync == "force")
        if note:
            self.preflight_notes.append(note)
        for task in plan.tasks:
            if task.cwd and not workdir_sync.inside(root, os.path.abspath(task.cwd)):
                raise PreflightError(f"{task.name}: workdir {task.cwd} lies outside the "
                                     f"workdir {root} that ssh.sync copies")
        self._copy = copy

    def _send_copy(self, session: HostSession, copy: workdir_sync.Manifest, state: dict,
                   host: str) -> str | None:
        """The files ``host`` lacks, as a tar stream through its master connection into the
        scratch folder its bootstrap named; why that failed, or None."""
        if "problem" in state:
            return f"ssh.sync: {state['problem']}; nothing of the copy is used"
        incoming = str(state["incoming"])
        missing = list(state.get("missing") or [])
        need = sum(copy.sizes[d] for d in missing)
        if need > int(state.get("free", need)):
            return (f"ssh.sync: no room for the copy in {self.options.sync_dir} on this host "
                    f"({workdir_sync.human(int(state['free']))} free, the files it lacks "
                    f"are {workdir_sync.human(need)}); nothing was copied")
        with self._lock:
            master = self._masters.get(host)
            argv = self.ssh_argv(host, f"exec tar -x -f - -C {shlex.quote(incoming)}",
                                 mux=master is not None and master.ready)
        with tempfile.TemporaryFile() as errors:
            proc = subprocess.Popen(dies_with_parent(argv), stdin=subprocess.PIPE,
                                    stdout=subprocess.DEVNULL, stderr=errors,
                                    start_new_session=True)
            sent = 0
            try:
                sent = workdir_sync.write_tar(copy, missing, cast(IO[bytes], proc.stdin))
            except OSError:
                pass        # tar ended early: its status and message say why
            finally:
                with contextlib.suppress(OSError):
                    cast(IO[bytes], proc.stdin).close()
            status = proc.wait()
            errors.seek(0)
            said = [ln.strip() for ln in errors.read().decode(errors="replace").splitlines()
                    if ln.strip()]
        with self._lock:
            self.sent[host] = sent
        if status == 0:
            return None
        if status == 127 or any("tar: not found" in ln or "tar: command not found" in ln
                                for ln in said):
            return (f"ssh.sync: no tar on this host (needed to copy the workdir into "
                    f"{self.options.sync_dir}); nothing was copied")
        detail = next((ln for ln in said if "Exiting with failure" not in ln),
                      f"exit status {status}")
        return (f"ssh.sync: copying the workdir into {incoming} failed: {detail}; nothing "
                f"of the copy is used")

    def gpu_machines(self, plan: JobPlan) -> list[gpus.Machine] | None:
        """Each host's GPUs, as its preflight check found them (None before it ran)."""
        if self._gpu_answers is None:
            return None
        return gpus.machines_by_host(plan, self._gpu_answers)

    def _description(self, task: TaskPlan, argv: list[str]) -> dict:
        return {"task": task.name, "argv": argv, "env": task.env, "cwd": self.remote_cwd(task),
                "grace": self.timeouts.get("kill", 5.0), "silence": self.silence}

    @property
    def silence(self) -> float:
        """Seconds without a heartbeat after which a host ends its task by itself: the
        launcher has declared it lost by then (``timeouts.unresponsive``), so a host cut
        off from the launcher leaves no orphan, even while the link stays down."""
        return max(MIN_SILENCE, 3 * HEARTBEAT, self.timeouts.get("unresponsive") or 30.0)

    def _beat(self) -> None:
        while not self._closed.wait(HEARTBEAT):
            with self._lock:
                sessions = list(self._hosts.values())
            for session in sessions:
                session.heartbeat()

    def _session(self, task: TaskPlan) -> HostSession:
        """A new bootstrap on ``task``'s host, with the task's Python, through the host's
        master when it has one that is up."""
        with self._lock:
            master = self._masters.get(task.host)
            mux = master is not None and master.ready
            argv = self.ssh_argv(task.host, remote_command(self._python(task)), mux=mux)
        return HostSession(task.host, argv)

    def start(self, task: TaskPlan) -> SSHHandle:
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
        handle = session.run(task, self._description(task, task.command))
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
        return ProbeResult(answer["probe"]["status"], answer["probe"]["output"])

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

    def _stop_master(self, host: str) -> None:
        """``ssh -O exit`` (the master ends once its sessions are closed); SIGTERM when
        that does not end it."""
        with self._lock:
            master = self._masters.pop(host, None)
        if master is None:
            return
        if master.proc.poll() is None:
            argv = self.ssh_argv(host, master_path=master.path)
            at = argv.index("-M")
            subprocess.run(argv[:at] + ["-O", "exit", "-o", f"ControlPath="
                                        f"{_ssh_path(master.path)}", "--", host],
                           stdin=subprocess.DEVNULL, capture_output=True, timeout=10,
                           check=False)
            try:
                master.proc.wait(timeout=5)
            except subprocess.TimeoutExpired:
                master.proc.terminate()
                try:
                    master.proc.wait(timeout=5)
                except subprocess.TimeoutExpired:
                    master.proc.kill()
                    master.proc.wait()
        master.log.close()

    def close(self) -> None:
        """End every host's session (its bootstrap ends what still runs), then every
        master with ``ssh -O exit``; remove the control directory."""
        self._closed.set()
        with self._lock:
            sessions = [*self._hosts.values(), *self._old]
            self._hosts, self._old = {}, []
        for session in sessions:
            session.close_stdin()
        grace = self.timeouts.get("kill", 5.0) + 5
        list(CONNECT_POOL.map(lambda s: s.discard(grace), sessions))
        list(CONNECT_POOL.map(self._stop_master, list(self._masters)))
        if self._control_dir is not None:
            shutil.rmtree(self._control_dir, ignore_errors=True)
            self._control_dir = None


def _local_path(url: str) -> str | None:
    return url.removeprefix("file://") if "://" not in url.removeprefix("file://") else None


def tensorflow_notes(found: dict[str, dict[str, str]]) -> list[str]:
    """One line with the TensorFlow each host's tasks import; which hosts differ."""
    hosts_of: dict[str, list[str]] = {}
    for host, versions in found.items():
        for version in sorted(set(versions.values())):
            hosts_of.setdefault(version, []).append(host)
    if not hosts_of:
        return []
    if len(hosts_of) == 1:
        version, hosts = next(iter(hosts_of.items()))
        return [f"TensorFlow {version} on every host ({len(hosts)})"]
    parts = [f"{v} on {', '.join(sorted(h))}" for v, h in sorted(hosts_of.items())]
    return ["TensorFlow differs between hosts: " + "; ".join(parts)]


def sync_line(copy: workdir_sync.Manifest, sent: dict[str, int]) -> str:
    """What ssh.sync did: the workdir's size, and what went to which hosts."""
    moved = {h: n for h, n in sent.items() if n}
    what = (f"sent {workdir_sync.human(sum(moved.values()))} to {len(moved)} of {len(sent)} "
            f"hosts" if moved else f"every host ({len(sent)}) had it already")
    return (f"ssh.sync: workdir {copy.root} ({len(copy.entries)} entries, "
            f"{workdir_sync.human(copy.total)}, tree {copy.tree[:12]}): {what}")


# Threads that connect to hosts, shared by every run of this process and never ended: the
# ssh clients started there get their parent-death signal when their thread ends.
CONNECT_POOL = ThreadPoolExecutor(max_workers=HOST_POOL, thread_name_prefix="ssh-connect")

BACKEND = SSHBackend
