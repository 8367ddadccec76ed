"""The ssh backend through its interface (what the job loop and the storage check call):
probes run where the task will run, with its environment, before and after the task
started, and end at their timeout; signals reach the task's whole process group; a task
started again runs in its host's session."""

from __future__ import annotations

import contextlib
import signal
import time

import psutil
from support import PY_TF215

from launcher.api import validate
from launcher.backends.ssh import SSHBackend
from launcher.plan import build_plan


def make_backend(bed, command: list[str]):
    raw = {"name": "api", "backend": "ssh", "model_dir": str(bed.workdir / "model"),
           "cluster": {"chief": [bed.hosts[0].address], "worker": [bed.hosts[1].address]},
           "command": command, "env": {"GREETING": "it's $(not) run"},
           "timeouts": {"kill": 2}, "ssh": bed.ssh_section()}
    spec = validate(raw)
    backend = SSHBackend(SSHBackend.validate_options(raw["ssh"], "ssh"))
    return backend, build_plan(spec, port_for=backend.allocate_port)


def wait_status(handle, timeout: float = 30) -> int | None:
    deadline = time.monotonic() + timeout
    while handle.poll() is None and time.monotonic() < deadline:
        time.sleep(0.02)
    return handle.poll()


def gone(bed, host, task: str, timeout: float = 10) -> bool:
    """No process of ``task`` (its environment names it) is left on ``host``; the host's
    bootstrap stays for the other tasks."""
    def left() -> list:
        found = []
        for proc in bed.processes(host):
            with contextlib.suppress(psutil.Error):
                if proc.environ().get("TFCLUSTER_TASK") == task:
                    found.append(proc)
        return found

    deadline = time.monotonic() + timeout
    while left() and time.monotonic() < deadline:
        time.sleep(0.05)
    return not left()


def test_probes_before_and_after_start_and_group_signals(hosts):
    script = ("import os, subprocess, sys, time; "
              "subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(300)']); "
              "print('up', os.environ['TFCLUSTER_TASK'], flush=True); time.sleep(300)")
    backend, plan = make_backend(hosts, [PY_TF215, "-c", script])
    chief, worker = plan.task("chief"), plan.task("worker")
    show = ["sh", "-c", 'echo "$GREETING" on $(hostname); exit 3']
    handles = []
    try:
        backend.preflight(plan)
        before = backend.probe(worker, show, timeout=30)        # in h2's preflight session
        assert (before.returncode, before.output) == (3, "it's $(not) run on h2\n")
        handles = [backend.start(chief), backend.start(worker)]
        for handle in handles:
            assert handle.output.readline().decode().startswith(f"up {handle.task.name}")
        after = backend.probe(worker, show, timeout=30)         # beside the task there
        assert (after.returncode, after.output) == (3, "it's $(not) run on h2\n")
        slow = backend.probe(chief, ["sleep", "60"], timeout=1)
        assert slow.returncode == 124
        assert [h.poll() for h in handles] == [None, None]     # the probes left them alone
        handles[0].signal(signal.SIGTERM)
        assert wait_status(handles[0]) == -signal.SIGTERM
        assert gone(hosts, hosts.hosts[0], "chief:0")           # its grandchild too
        handles.append(backend.start(chief))                    # restarted: same session
        assert handles[-1].output.readline().decode().startswith("up chief:0")
        assert handles[-1].pid == handles[0].pid                # the same local ssh
        handles[1].kill()
        assert wait_status(handles[1]) == -signal.SIGKILL
    finally:
        for handle in handles:
            handle.kill()
            wait_status(handle)
            handle.output.close()
        backend.close()


def test_a_command_refused_at_its_start_is_one_line_from_its_host(hosts):
    """The program changed between the check and the start (no #! line any more): the
    bootstrap words the kernel's refusal on the host, in one line."""
    program = hosts.workdir / "refused-train"
    program.write_text("#!/bin/sh\nexit 0\n")
    program.chmod(0o755)
    backend, plan = make_backend(hosts, [str(program), "--steps", "3"])
    try:
        backend.preflight(plan)
        program.write_text("echo no shebang any more\n")
        handle = backend.start(plan.task("chief"))
        assert wait_status(handle) == 126
        line = f"chief:0: cannot start {program} --steps 3 on h1: no #! line and not a " \
               "binary (exec format error)"
        assert handle.start_failure == line
        assert handle.output.read().decode() == f"tfcluster-bootstrap: {line}\n"
        handle.output.close()
    finally:
        backend.close()
