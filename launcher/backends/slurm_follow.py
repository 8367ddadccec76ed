"""Slurm's client commands by the job's id: its allocation (salloc), state (squeue, sacct,
``scontrol show job``), nodes, restarts and cancel; and ``SlurmFollower``, which follows a
run by its handle (``{"slurm_job": "12"}``) for ``launch status``, ``launch cancel`` and
model_dir's lease."""

from __future__ import annotations

import os
import re
import subprocess
import threading
import time
from typing import TYPE_CHECKING, Any, Callable

from launcher.backends.engine import Follower
from launcher.errors import PreflightError

if TYPE_CHECKING:
    from launcher.backends.watchdog import Watchdog

CANCEL_WAIT = 120.0                # seconds for the launcher's teardown after `launch cancel`
LIVE_STATES = ("PENDING", "CONFIGURING", "RUNNING", "COMPLETING", "SUSPENDED", "RESIZING",
               "REQUEUED", "SIGNALING", "STAGE_OUT")
GRANTED = re.compile(r"job allocation (\d+)")


def slurm_env() -> dict[str, str]:
    """The launcher's environment without the SLURM_* variables of an enclosing job, which
    would otherwise redirect salloc/srun (SLURM_CONF stays: it names the cluster)."""
    return {k: v for k, v in os.environ.items()
            if not k.startswith("SLURM_") or k == "SLURM_CONF"}


def run_slurm(argv: list[str], timeout: float = 30) -> subprocess.CompletedProcess:
    try:
        return subprocess.run(argv, env=slurm_env(), capture_output=True, text=True,
                              timeout=timeout, stdin=subprocess.DEVNULL)
    except (OSError, subprocess.TimeoutExpired) as e:
        return subprocess.CompletedProcess(argv, 127, "", str(e))


def job_state(job_id: str) -> str:
    """The job's state: squeue while Slurm holds it, then sacct, then ``scontrol show job``
    (no accounting store), else GONE."""
    done = run_slurm(["squeue", "-h", "-j", job_id, "-o", "%T"])
    if done.returncode == 0 and done.stdout.strip():
        return done.stdout.split()[0]
    done = run_slurm(["sacct", "-n", "-X", "-P", "-j", job_id, "-o", "State"])
    if done.returncode == 0 and done.stdout.strip():
        return done.stdout.split()[0].rstrip("+")
    done = run_slurm(["scontrol", "show", "job", "-o", job_id])
    m = re.search(r"\bJobState=(\S+)", done.stdout) if done.returncode == 0 else None
    return m.group(1) if m else "GONE"


def salloc(argv: list[str], watchdog: Watchdog | None,
           granted: Callable[[str], None]) -> tuple[int, list[str]]:
    """Run salloc to its end: (its exit status, its lines); ``granted(job_id)`` as soon as
    it names the job. A pending salloc ends with the launcher (``watchdog``), and on any
    interruption here (then raised on)."""
    try:
        proc = subprocess.Popen(argv, env=slurm_env(), stdin=subprocess.DEVNULL,
                                stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                                text=True, start_new_session=True)
    except FileNotFoundError:
        raise PreflightError("salloc not found: the Slurm client commands must be on "
                             "PATH") from None
    lines: list[str] = []

    def read() -> None:
        for line in proc.stderr or ():
            lines.append(line.rstrip())
            m = GRANTED.search(line)
            if m:
                granted(m.group(1))

    if watchdog is not None:
        watchdog.watch(proc.pid)
    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    try:
        status = proc.wait()
        reader.join(timeout=5)
        if watchdog is not None:
            watchdog.forget(proc.pid)
    except BaseException:
        proc.terminate()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
        raise
    return status, lines


def restarts(job_id: str) -> int | None:
    """How many times Slurm requeued the job (``scontrol show job``'s Restarts); None when
    it cannot tell."""
    done = run_slurm(["scontrol", "show", "job", "-o", job_id])
    m = re.search(r"\bRestarts=(\d+)", done.stdout) if done.returncode == 0 else None
    return int(m.group(1)) if m else None


def job_nodes(job_id: str) -> list[str]:
    """The nodes Slurm gave the job, in its order."""
    done = run_slurm(["squeue", "-h", "-j", job_id, "-o", "%N"])
    nodelist = done.stdout.strip()
    if not nodelist:
        return []
    names = run_slurm(["scontrol", "show", "hostnames", nodelist])
    return names.stdout.split()


def node_addr(node: str) -> str:
    """The node's NodeAddr (its name where Slurm gives none)."""
    done = run_slurm(["scontrol", "show", "node", "-o", node])
    m = re.search(r"\bNodeAddr=(\S+)", done.stdout)
    return m.group(1) if m else node


def cancel_job(job_id: str, queued: bool = False, wait: float = CANCEL_WAIT) -> str:
    """``launch cancel`` of a detached run: SIGTERM to the batch step only (the launcher,
    which stops its steps in order and exits), then ``scancel J`` for whatever is left;
    wait until Slurm shows the job ended. Its final state."""
    if not queued:
        run_slurm(["scancel", "--batch", "--signal=TERM", job_id])
        wait_ended(job_id, wait)
    run_slurm(["scancel", job_id])
    return wait_ended(job_id, 60.0)


def wait_ended(job_id: str, wait: float) -> str:
    deadline = time.monotonic() + wait
    state = job_state(job_id)
    while state in LIVE_STATES and time.monotonic() < deadline:
        time.sleep(0.2)
        state = job_state(job_id)
    return state


class SlurmFollower(Follower):
    """A run whose handle names a Slurm job (``batch``: its launcher runs inside it)."""

    @classmethod
    def describe_handle(cls, handle: dict[str, Any]) -> str:
        return f"Slurm job {handle['slurm_job']}" if handle.get("slurm_job") else ""

    @classmethod
    def engine_state(cls, handle: dict[str, Any], recorded: str) -> tuple[str, str] | None:
        """squeue's (then sacct's) word on the run's job: queued while it waits, lost when
        it ended without the run recording its end."""
        job = handle.get("slurm_job")
        if not job or not isinstance(job, str):
            return None
        engine = job_state(job)
        if engine in ("PENDING", "REQUEUED", "CONFIGURING"):
            return "queued", f"Slurm job {job} is {engine}"
        if engine not in LIVE_STATES:
            return "lost", (f"the launcher died: Slurm job {job} is {engine} but the run "
                            "never recorded its end")
        return recorded, f"Slurm job {job} is {engine}"

    @classmethod
    def holds(cls, handle: dict[str, Any]) -> bool:
        """Slurm still has the job (pending, requeued, running); False when it cannot tell."""
        seen = cls.engine_state(handle, "running")
        return seen is not None and seen[0] != "lost"

    @classmethod
    def launcher_inside(cls, handle: dict[str, Any]) -> bool:
        return bool(handle.get("batch"))

    @classmethod
    def cancel_run(cls, handle: dict[str, Any], queued: bool) -> None:
        if handle.get("slurm_job"):     # the launcher inside the batch job, or what is left
            cancel_job(handle["slurm_job"], queued=queued)
