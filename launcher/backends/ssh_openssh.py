"""OpenSSH for the ssh backend: the spec's ``ssh`` section (``SSHOptions``), the ``ssh``
command lines made from it, ssh's errors in words a user acts on, and each host's master
connection (ControlMaster; its socket in the run's private control directory, closed with
``ssh -O exit``).
"""

from __future__ import annotations

import glob
import math
import os
import secrets
import shlex
import shutil
import subprocess
import tempfile
import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import IO, Any

import psutil

from launcher.backends.agent.entry import SSH_STUB
from launcher.backends.processes import dies_with_parent
from launcher.checks import expect_str
from launcher.errors import SpecError
from launcher.spec.declared import STRING, key, line, lines, user_path

# OpenSSH options the backend sets itself or that have their own key in the ssh section.
RESERVED = {"batchmode": "", "stricthostkeychecking": "strict_host_key_checking",
            "userknownhostsfile": "known_hosts_file", "connecttimeout": "connect_timeout",
            "identityfile": "identity_file", "user": "user", "port": "port",
            "controlmaster": "multiplex", "controlpath": "multiplex",
            "controlpersist": "multiplex", "requesttty": ""}


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

    user: str | None = key(STRING, "remote user name", None, parse=line, check=_user_name)
    port: int | None = key({"type": "integer", "minimum": 1, "maximum": 65535},
                           "sshd port of every host", None)
    identity_file: str | None = key(STRING, "private key file", None, parse=user_path)
    known_hosts_file: str | None = key(STRING, "known_hosts file", None, parse=user_path)
    strict_host_key_checking: bool | str = key(
        {"enum": [True, False, "accept-new"]}, "host-key checking (on by default)", True,
        problem='must be true, false or "accept-new"')
    connect_timeout: float = key({"type": "number", "minimum": 1}, "seconds to connect", 10.0)
    config_file: str | None = key(STRING, "an ssh_config file", None, parse=user_path)
    options: dict[str, str] = key({"type": "object"}, "more OpenSSH options (-o NAME=VALUE)",
                                  factory=dict, parse=lines, check=_openssh_options)
    python: str | None = key(STRING, "the remote bootstrap's interpreter", None, parse=line)
    multiplex: bool = key({"type": "boolean"}, "a master connection (ControlMaster) per host",
                          True)
    sync: bool | str = key(
        {"enum": [False, True, "force"]}, "copy the workdir to every host before any task "
        "starts (\"force\": above the size limit too)", False,
        problem='must be true, false or "force"')
    sync_dir: str = key(STRING, "where each host keeps the copies (relative: to the login "
                        "directory)", "~/.cache/tfcluster/sync", parse=line)



def _ssh_path(path: str) -> str:
    """A path as an OpenSSH option value: '%' is a token there, whitespace splits words."""
    path = path.replace("%", "%%")
    return f'"{path}"' if any(c.isspace() for c in path) else path


def remote_command(python: str) -> str:
    """What the remote shell runs: the agent's stub (isolated, no site-packages: it needs
    only the standard library). Nothing of the task is in it."""
    return f"exec {shlex.quote(python)} -I -S -c {shlex.quote(SSH_STUB)}"


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
class Master:
    """A host's master connection (ControlMaster): every session to that host goes through
    it; ``ssh -O exit`` closes it."""

    proc: subprocess.Popen
    path: str
    log: IO[bytes]

    @property
    def ready(self) -> bool:
        return self.proc.poll() is None and os.path.exists(self.path)


class OpenSSH:
    """The ``ssh`` command lines of the spec's options, and each host's master connection."""

    def __init__(self, options: SSHOptions):
        self.options = options
        self.masters: dict[str, Master] = {}
        self._control_dir: str | None = None
        self._lock = threading.Lock()

    def argv(self, host: str, command: str | None = None, master_path: str | None = None,
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
                     "-o", f"ControlPath={_ssh_path(self.masters[host].path)}"]
        argv += ["--", host]
        if command is not None:
            argv.append(command)
        return argv

    def session_argv(self, host: str, command: str) -> list[str]:
        """``command`` on ``host``, through its master connection when it has one that is
        up."""
        with self._lock:
            master = self.masters.get(host)
            return self.argv(host, command, mux=master is not None and master.ready)

    def _new_control_path(self) -> str:
        if self._control_dir is None:
            base = "/tmp" if os.path.isdir("/tmp") else tempfile.gettempdir()  # sockets: short
            _remove_stale_control_dirs(base)
            self._control_dir = tempfile.mkdtemp(prefix=f"tfc-ssh-{os.getpid()}-", dir=base)
        return os.path.join(self._control_dir, secrets.token_hex(4))

    def start_master(self, host: str, deadline: float) -> str | None:
        """Start ``host``'s master connection and wait until it is up; why it failed."""
        with self._lock:
            path = self._new_control_path()
        log = tempfile.TemporaryFile()  # noqa: SIM115 - closed with the master
        proc = subprocess.Popen(dies_with_parent(self.argv(host, master_path=path)),
                                stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                                stderr=log, start_new_session=True)
        master = Master(proc, path, log)
        with self._lock:
            self.masters[host] = master
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
        self.stop_master(host)
        return why

    def stop_master(self, host: str) -> None:
        """``ssh -O exit`` (the master ends once its sessions are closed); SIGTERM when
        that does not end it."""
        with self._lock:
            master = self.masters.pop(host, None)
        if master is None:
            return
        if master.proc.poll() is None:
            argv = self.argv(host, master_path=master.path)
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

    def close(self, each: Callable[..., Iterable] = map) -> None:
        """Every master with ``ssh -O exit`` (``each``: a pool's map, to stop them at once);
        the control directory removed."""
        list(each(self.stop_master, list(self.masters)))
        if self._control_dir is not None:
            shutil.rmtree(self._control_dir, ignore_errors=True)
            self._control_dir = None
