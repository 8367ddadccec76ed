"""Helpers every test folder imports (`from support import ...`): paths to the two
TensorFlow environments, running `launch`, and finding the processes our tests started.

They live here, not in conftest.py: pytest imports every conftest.py under the one name
`conftest`, so `from support import` would find whichever folder's was loaded last."""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import sys
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import psutil

REPO = Path(__file__).resolve().parent.parent
PY_TF215 = str(REPO / ".venv" / "bin" / "python")     # TensorFlow 2.15, Estimator
PY_TF221 = str(REPO / ".venv-tf2" / "bin" / "python")  # TensorFlow 2.21, PSS / MWMS
SESSION_MARK = "TFCLUSTER_TEST_SESSION"
FAKE_NVIDIA_SMI = REPO / "tests" / "fake_gpu" / "nvidia-smi"


def _own_mark() -> str:
    """This test process's mark: kept when inherited from the same process (a subprocess
    that imports this module), fresh for each pytest-xdist worker, which would otherwise
    inherit the controller's and take the other workers' tasks for its own leftovers."""
    worker = os.environ.get("PYTEST_XDIST_WORKER", "")
    mark = os.environ.get(SESSION_MARK, "")
    if not mark or not mark.endswith(f"-{worker}"):
        mark = f"{uuid.uuid4().hex}-{worker}"
    return mark


# Every process a test starts inherits this mark, so leftovers can be found exactly.
os.environ[SESSION_MARK] = _own_mark()


def _environs() -> Iterator[tuple[int, bytes]]:
    """(pid, raw /proc/PID/environ) of every process readable here, this one left out; a
    zombie's is empty. Read raw: this runs after every test, over hundreds of processes."""
    me = os.getpid()
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit() or int(entry.name) == me:
            continue
        try:
            with open(f"/proc/{entry.name}/environ", "rb") as f:
                yield int(entry.name), b"\0" + f.read()
        except OSError:         # gone, or not ours to read
            continue


def _marked(*also: bytes) -> list[psutil.Process]:
    """Live processes carrying this session's mark, and each of ``also`` (``NAME=``
    prefixes) in their environment."""
    needle = f"\0{SESSION_MARK}={os.environ[SESSION_MARK]}\0".encode()
    found = []
    for pid, environ in _environs():
        if needle in environ and all(b"\0" + name in environ for name in also):
            with contextlib.suppress(psutil.NoSuchProcess):
                found.append(psutil.Process(pid))
    return found


def marked_processes() -> list[psutil.Process]:
    """Live processes carrying this test session's mark (started by our tests)."""
    return _marked()


def local_ssh_processes() -> list[psutil.Process]:
    """ssh clients and masters started by this test session's launchers."""
    found = []
    for proc in marked_processes():
        try:
            if proc.name() == "ssh":
                found.append(proc)
        except psutil.Error:
            continue
    return found


def tfcluster_tasks() -> list[psutil.Process]:
    """Marked processes that are tasks of a tfcluster job (they carry TFCLUSTER_RUN_ID)."""
    return _marked(b"TFCLUSTER_RUN_ID=")


def wait_gone(predicate: Callable[[], list] = tfcluster_tasks, timeout: float = 10.0) -> list:
    """What ``predicate`` still finds once it found nothing or ``timeout`` passed."""
    deadline = time.monotonic() + timeout
    left = predicate()
    while left and time.monotonic() < deadline:
        time.sleep(0.1)
        left = predicate()
    return left


def nothing_left_on(bed: str, leftovers: Callable[[Any], dict[str, Any]],
                    clear: Callable[[Any, dict[str, Any]], None]) -> Callable:
    """The autouse fixture of a machine-wide bed (the session fixture named ``bed``: the
    Docker engine, the SSH hosts, the Slurm cluster): it fails a test that used the bed and
    left something on it, then clears it. ``leftovers(bed)``: what is still there, by kind,
    once what is ending had its time to go; ``clear(bed, left)`` removes it."""
    import pytest

    @pytest.fixture(autouse=True, name=f"nothing_left_on_{bed}")
    def nothing_left(request):
        yield
        if bed not in request.fixturenames:
            return
        used = request.getfixturevalue(bed)
        left = {kind: found for kind, found in leftovers(used).items() if found}
        if left:
            clear(used, left)
            pytest.fail(f"left on the {bed} after the test: "
                        + "; ".join(f"{kind} {found}" for kind, found in left.items()))

    return nothing_left


def launch_cmd(*args: str) -> list[str]:
    """The `launch` console script of the environment running the tests."""
    return [str(Path(sys.executable).parent / "launch"), *args]


def run_launch(*args: str, timeout: float = 300, cwd: str | os.PathLike | None = None,
               env: dict | None = None) -> subprocess.CompletedProcess:
    """Run `launch ARGS...` to its end; stdout and stderr as text."""
    full_env = dict(os.environ)
    full_env.update(env or {})
    return subprocess.run(launch_cmd(*args), cwd=cwd or REPO, env=full_env, text=True,
                          capture_output=True, timeout=timeout, stdin=subprocess.DEVNULL)


def sigterm_once(spec: str | os.PathLike, runs: Path, reached: Callable[[str], bool],
                 log: str = "chief-0.log", wait: float = 240.0,
                 ) -> tuple[subprocess.CompletedProcess, str]:
    """`launch SPEC` (stdout and stderr together), SIGTERM once ``reached`` holds for the
    text of the run's task log ``log`` under ``runs`` (the spec's run_dir); the test fails
    when `launch` ends first or ``wait`` s pass. The ended process and the log's text as it
    was when the signal went (the preemption tests' notice, the resumed runs)."""
    import signal

    proc = subprocess.Popen(launch_cmd(str(spec)), cwd=REPO, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True, stdin=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + wait
        while True:
            assert proc.poll() is None, proc.communicate()[0][-3000:]
            assert time.monotonic() < deadline, f"{log}: not there within {wait:.0f}s"
            logs = list(runs.glob(f"*/logs/{log}"))
            text = logs[0].read_text(errors="replace") if logs else ""
            if text and reached(text):
                break
            time.sleep(0.2)
        proc.send_signal(signal.SIGTERM)
        out, _ = proc.communicate(timeout=180)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    return subprocess.CompletedProcess(proc.args, proc.returncode, out, ""), text


def run_dir(tmp_path: Path) -> Path:
    """The one run directory of a test whose spec has ``"run_dir": tmp_path / "runs"``."""
    (found,) = (tmp_path / "runs").iterdir()
    return found


def events(tmp_path: Path) -> list[dict]:
    """That run's events.jsonl, one dict per event."""
    lines = (run_dir(tmp_path) / "events.jsonl").read_text().splitlines()
    return [json.loads(line) for line in lines]


class FakeClock:
    """A clock for code that takes ``clock`` and ``sleep`` callables: sleeping advances it."""

    def __init__(self):
        self.now = 0.0

    def __call__(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.now += seconds


@contextlib.contextmanager
def launched(*args: str, env: dict | None = None) -> Iterator[subprocess.Popen]:
    """`launch ARGS...` running in the background (stderr piped as text, stdout dropped);
    killed on the way out if the test left it running."""
    proc = subprocess.Popen(launch_cmd(*args), cwd=REPO, env=env, text=True,
                            stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                            stderr=subprocess.PIPE)
    try:
        yield proc
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def ended_well(row: dict) -> bool:
    """A worker of asynchronous training ended well: it exited 0, or it was still closing
    its session when the launcher stopped it, after the chief saved the final checkpoint
    and exited (docs/ending.md)."""
    return (row["exit"], row["stopped"]) in ((0, False), (-15, True))


# ---------------------------------------------------------------- detached runs
def detach(spec: Path, env: dict, *args: str, timeout: float = 120) -> str:
    """`launch SPEC --detach ARGS`: it returns (exit 0) and names the run and the commands
    that follow it; the run id."""
    done = run_launch(str(spec), "--detach", *args, env=env, timeout=timeout)
    assert done.returncode == 0, done.stderr
    first = done.stdout.splitlines()[0]
    assert first.startswith("run ") and " detached (launcher pid " in first, done.stdout
    run_id = first.split()[1]
    for verb in ("status", "logs", "cancel"):
        assert f"launch {verb} {run_id}" in done.stdout
    return run_id


def state_of(tmp_path: Path, run_id: str) -> dict:
    """The run's state.json under the test's run root (the ``runs`` fixture)."""
    return json.loads((tmp_path / "runs" / run_id / "state.json").read_text())


def wait_state(tmp_path: Path, run_id: str, want: tuple[str, ...], timeout: float) -> dict:
    """The run's state once it is one of ``want`` (or the last seen after ``timeout``)."""
    deadline = time.monotonic() + timeout
    while True:
        state = state_of(tmp_path, run_id)
        if state["state"] in want or time.monotonic() > deadline:
            return state
        time.sleep(0.3)


def daemon_alive(state: dict) -> bool:
    """The run's detached launcher is still running."""
    try:
        return psutil.Process(state["launcher"]["pid"]).status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


@contextlib.contextmanager
def cancelled_on_exit(tmp_path: Path, env: dict) -> Iterator[None]:
    """Whatever a failing test left running under its run root is cancelled on the way
    out."""
    try:
        yield
    finally:
        for run_dir in (tmp_path / "runs").glob("*"):
            run_launch("cancel", str(run_dir), env=env, timeout=180)


def check_listed_running(run_id: str, name: str, backend: str, env: dict) -> list[str]:
    """`launch status` and `launch list` say the run is running; its task rows."""
    status = run_launch("status", run_id, env=env)
    assert status.returncode == 0, status.stdout + status.stderr
    assert f"run {run_id}  {name}  backend {backend}  state running" in status.stdout
    listed = run_launch("list", env=env)
    row = next(line for line in listed.stdout.splitlines() if line.startswith(run_id))
    assert row.split()[1:4] == [name, backend, "running"], listed.stdout
    return status.stdout.splitlines()[2:]


def check_succeeded(run_id: str, state: dict, env: dict) -> None:
    """A stand-in job's run ended well: `launch status` says succeeded and why; chief and
    worker ended by themselves, the ps was stopped; the chief's log is there."""
    status = run_launch("status", run_id, env=env)
    assert status.returncode == 0, status.stdout
    assert "state succeeded" in status.stdout
    assert "reason: training finished and every task ended" in status.stdout
    rows = {t["task"]: t for t in state["tasks"]}
    assert (rows["chief:0"]["exit"], rows["chief:0"]["stopped"]) == (0, False), rows
    assert (rows["worker:0"]["exit"], rows["worker:0"]["stopped"]) == (0, False), rows
    assert rows["ps:0"]["stopped"] and rows["ps:0"]["state"] == "stopped (SIGTERM)", rows
    logs = run_launch("logs", run_id, "chief:0", env=env)
    assert logs.returncode == 0 and "hello from chief:0" in logs.stdout, logs.stdout


def check_cancelled(tmp_path: Path, run_id: str, env: dict, trainers: list[str]) -> None:
    """After `launch cancel`: status says cancelled and why, every task was stopped with
    SIGTERM, the trainers first and the ps last."""
    status = run_launch("status", run_id, env=env)
    assert status.returncode == 1, status.stdout
    assert "state cancelled" in status.stdout
    assert "reason: cancelled by `launch cancel` (interrupted by SIGTERM)" in status.stdout
    tasks = state_of(tmp_path, run_id)["tasks"]
    assert all(t["stopped"] and t["state"] == "stopped (SIGTERM)" for t in tasks), tasks
    lines = (tmp_path / "runs" / run_id / "events.jsonl").read_text().splitlines()
    stops = [sorted(e["tasks"]) for e in map(json.loads, lines) if e["event"] == "stopping"]
    assert stops == [sorted(trainers), ["ps:0"]], stops


def fake_gpus(where: Path, counts: int | dict[str, int]) -> str:
    """A folder to put first on PATH (here, or in a task's env for ssh hosts) whose
    ``nvidia-smi`` is the stand-in (tests/fake_gpu/nvidia-smi) answering for ``counts``
    devices: one number for every host, or a count per host name."""
    folder = where / "fake-gpu-bin"
    folder.mkdir(exist_ok=True)
    lines = [str(counts)] if isinstance(counts, int) else [f"{h} {n}" for h, n in counts.items()]
    (folder / "counts").write_text("\n".join(lines) + "\n")
    wrapper = folder / "nvidia-smi"
    wrapper.write_text(f"#!/bin/sh\nFAKE_GPUS_FILE={folder / 'counts'} "
                       f"exec {sys.executable} {FAKE_NVIDIA_SMI} \"$@\"\n")
    wrapper.chmod(0o755)
    return str(folder)


def read_events(path: str) -> list[dict]:
    """A run's events.jsonl, one dict per line."""
    with open(path, encoding="utf-8") as f:
        return [json.loads(line) for line in f if line.strip()]
