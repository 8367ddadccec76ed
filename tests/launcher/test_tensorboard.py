"""TensorBoard as a process the launcher owns (launcher/tensorboard.py), with a stand-in
TensorBoard: its URL is said once it serves, a crash is a note, stop ends its whole process
group; which TensorBoard runs; what `launch status` shows."""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

import psutil
from support import PY_TF215, PY_TF221

from launcher.backends.local import LocalBackend
from launcher.backends.processes import free_port
from launcher.backends.ssh import SSHBackend, SSHOptions
from launcher.commands.runs import tensorboard_line
from launcher.plan import TaskPlan
from launcher.tensorboard import TensorBoard, board_task

FAKE = Path(__file__).resolve().parent / "jobs" / "fake_tensorboard.py"


def fake_board(tmp_path: Path, env: dict | None = None) -> tuple[TensorBoard, list, list]:
    port = free_port()
    task = TaskPlan("tensorboard", 0, "localhost", port,
                    [sys.executable, str(FAKE), "--logdir", str(tmp_path), "--port", str(port)],
                    dict(env or {}))
    said: list[str] = []
    records: list[dict] = []
    return (TensorBoard(task, LocalBackend(), str(tmp_path / "logs" / "tensorboard.log"),
                        said.append, records.append, kill_after=2, own_backend=True),
            said, records)


def wait_for(predicate, timeout: float = 30.0):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(0.05)
    return False


def test_its_url_is_said_once_it_serves_and_stop_leaves_nothing(tmp_path):
    board, said, records = fake_board(tmp_path)
    board.start()
    try:
        assert board.ready.wait(30), said
        port = board.task.port
        assert said == [f"TensorBoard: http://localhost:{port}/  (logdir {tmp_path})"]
        assert records[-1]["url"] == f"http://localhost:{port}/"
        assert records[-1]["state"] == "running"
        log = tmp_path / "logs" / "tensorboard.log"
        assert wait_for(lambda: "child " in log.read_text())
        child = int(log.read_text().split("child ")[1].split()[0])
        parent = board.handle.pid
    finally:
        board.stop()
    assert not psutil.pid_exists(parent) or \
        psutil.Process(parent).status() == psutil.STATUS_ZOMBIE
    assert wait_for(lambda: not psutil.pid_exists(child), 10)     # its whole group
    assert records[-1]["state"] == "ended"
    assert said[1:] == []           # stopped on purpose: no note


def test_a_crash_is_a_note_not_an_error(tmp_path):
    board, said, records = fake_board(tmp_path, {"FAKE_TB": "crash"})
    board.start()
    assert board.ended.wait(30)
    board.stop()
    assert said == [f"note: TensorBoard ended (exit status 3): E1202 07:00:00.000000 1 "
                    f"program.py:300] error: could not bind to port {board.task.port}; the "
                    f"job goes on (log: {tmp_path / 'logs' / 'tensorboard.log'})"]
    assert records[-1]["state"] == "failed"


def chooser_board(tmp_path: Path, python: str, fallback: str, *args: str):
    """The real chooser with ``python`` (the chief's), the launcher's Python ``fallback``
    and a PATH without tensorboard."""
    task = board_task(python, {"PATH": "/usr/bin:/bin"}, None, "localhost", str(tmp_path),
                      free_port())
    task.command[3] = fallback
    task.command[4:] = list(args) or task.command[4:]
    said: list[str] = []
    return TensorBoard(task, LocalBackend(), str(tmp_path / "tensorboard.log"), said.append,
                       kill_after=2, own_backend=True), said


def test_no_tensorboard_anywhere_is_one_line_saying_how_to_get_it(tmp_path):
    board, said = chooser_board(tmp_path, PY_TF221, "")        # TF 2.21: no tensorboard
    board.start()
    assert board.ended.wait(60)
    board.stop()
    assert said == ["TensorBoard: no tensorboard where it would run (localhost): pip install "
                    "tensorboard into the tasks' Python environment (TensorFlow <= 2.15 "
                    "brings it; 2.16 and later do not)"]
    assert board.served.state == "not installed"


def test_the_tasks_python_without_tensorboard_falls_back_to_the_launchers(tmp_path):
    board, said = chooser_board(tmp_path, PY_TF221, PY_TF215, "--version_tb")
    board.start()
    assert board.ended.wait(120)
    board.stop()
    log = (tmp_path / "tensorboard.log").read_text()
    assert f"TensorBoard from {PY_TF215}" in log and "2.15" in log, log


def test_status_shows_the_url_while_the_run_lives_then_how_to_serve_it_again():
    running = {"url": "http://h1:6006/", "state": "running", "tunnel": None}
    assert tensorboard_line(running, True, "r-1") == "tensorboard: http://h1:6006/"
    tunnel = dict(running, tunnel="ssh -N -L 6006:localhost:6006 -- h1")
    assert tensorboard_line(tunnel, True, "r-1") == (
        "tensorboard: http://h1:6006/ (not reachable from its launcher: ssh -N -L "
        "6006:localhost:6006 -- h1)")
    assert tensorboard_line(running, False, "r-1") == (
        "tensorboard: ended with the run; `launch tensorboard r-1` serves the run")
    failed = {"state": "not installed", "note": "TensorBoard: no tensorboard where it would "
                                                "run (h1): pip install tensorboard"}
    assert tensorboard_line(failed, True, "r-1").startswith(
        "tensorboard: TensorBoard: no tensorboard where it would run (h1)")


def test_the_ssh_tunnel_command_uses_the_runs_ssh_options():
    backend = SSHBackend(SSHOptions(user="me", port=2222, identity_file="/k/id"))
    tunnel = backend.tunnel_command("h1", 6006)
    assert tunnel.startswith("ssh ") and tunnel.endswith(" -N -L 6006:localhost:6006 -- h1")
    for words in ("-p 2222", "-l me", "-i /k/id"):
        assert words in tunnel


def test_the_board_runs_with_the_chiefs_python_and_environment_but_no_gpus(tmp_path):
    task = board_task("/venv/bin/python", {"TF_CONFIG": "{}", "TFCLUSTER_RUN_ID": "r-1",
                                           "CUDA_VISIBLE_DEVICES": "0"},
                      "/work", "h1", "runs/model", 6006)
    assert task.command[0] == "/venv/bin/python" and task.cwd == "/work"
    assert task.command[4:] == ["--logdir", "runs/model", "--port", "6006", "--bind_all"]
    assert "TF_CONFIG" not in task.env and task.env["CUDA_VISIBLE_DEVICES"] == ""
    assert task.env["TFCLUSTER_RUN_ID"] == "r-1"     # `launch cancel` finds it with the run
    here = board_task("python", {}, None, "localhost", "m", 6006)
    assert here.command[-2:] == ["--host", "localhost"]


class TunnelledBackend(LocalBackend):
    """Starts here, names a host this machine cannot reach (as an ssh host behind a
    firewall would be)."""

    def tunnel_command(self, host: str, port: int) -> str:
        return f"ssh -N -L {port}:localhost:{port} -- {host}"


def test_a_host_not_reachable_from_here_gets_the_tunnel_command(tmp_path):
    port = free_port()
    task = TaskPlan("tensorboard", 0, "tfc-unreachable.invalid", port,
                    [sys.executable, str(FAKE), "--logdir", "m", "--port", str(port)], {})
    said: list[str] = []
    board = TensorBoard(task, TunnelledBackend(), str(tmp_path / "tb.log"), said.append,
                        kill_after=2, own_backend=True)
    board.start()
    try:
        assert board.ready.wait(30)
    finally:
        board.stop()
    assert said == [f"TensorBoard on tfc-unreachable.invalid:{port} is not reachable from "
                    f"here: run `ssh -N -L {port}:localhost:{port} -- tfc-unreachable.invalid` "
                    f"and open http://localhost:{port}/"]
    assert board.served.tunnel and board.served.url == \
        f"http://tfc-unreachable.invalid:{port}/"


def test_launch_tensorboard_refuses_what_it_cannot_serve_in_one_line(tmp_path, runs):
    from support import run_launch

    unknown = run_launch("tensorboard", "no-such-run", env=runs, timeout=60)
    assert unknown.returncode == 2 and unknown.stderr.startswith("launch: error: no run ")
    never = tmp_path / "never-started"
    never.mkdir()
    (never / "state.json").write_text('{"version": 1}')
    done = run_launch("tensorboard", str(never), timeout=60)
    assert (done.returncode, done.stderr) == (
        2, f"launch: error: {never} has no plan.json: the run never started\n")
    (never / "plan.json").write_text(json.dumps(
        {"storage": {"url": "/elsewhere/model"},
         "tasks": [{"type": "chief", "command": ["python", "t.py"]}]}))
    done = run_launch("tensorboard", str(never), timeout=60)
    assert (done.returncode, done.stderr) == (
        2, "launch: error: model_dir /elsewhere/model is not on this machine: run `launch "
           "tensorboard` on a host that has it\n")
