"""Detached runs on the local backend: `launch SPEC --detach` returns while the job runs as
a daemon; `launch list`, `status`, `logs -f` and `cancel` follow it from its run directory.
Real Estimator jobs (examples/estimator) for the user's path; stand-in tasks for the
launcher's SIGKILL."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import jsonschema
import pytest
from support import (
    PY_TF215,
    REPO,
    cancelled_on_exit,
    detach,
    launch_cmd,
    run_launch,
    state_of,
    tfcluster_tasks,
    wait_gone,
    wait_state,
)

FAKE_TASK = str(Path(__file__).resolve().parent / "fake_task.py")


def estimator_spec(tmp_path: Path, epochs: int) -> Path:
    """cluster_specs/estimator.json, smaller: a chief and its ps (what a detached run's
    following and cancelling look at: a task that ends by itself, one the launcher stops),
    no worker, no evaluator."""
    spec = json.loads((REPO / "cluster_specs" / "estimator.json").read_text())
    spec.update(cluster={"chief": ["localhost"], "ps": ["localhost"]},
                evaluator=None, examples=4000, epochs=epochs, model_dir=str(tmp_path / "model"),
                command=[PY_TF215, "examples/estimator/train.py", "--data-dir",
                         str(tmp_path / "data"), "--save-steps", "40"],
                workdir=str(REPO))
    path = tmp_path / "estimator.json"
    path.write_text(json.dumps(spec))
    return path


@pytest.mark.tf
def test_detached_estimator_job_list_status_logs_follow_and_succeed(tmp_path, runs):
    with cancelled_on_exit(tmp_path, runs):
        run_id = detach(estimator_spec(tmp_path, epochs=3), runs)
        # the launch that detached has exited: the job runs without it
        listed = run_launch("list", env=runs)
        row = next(line for line in listed.stdout.splitlines() if line.startswith(run_id))
        assert row.split()[1:4] == ["estimator", "local", "running"], listed.stdout
        status = run_launch("status", run_id, env=runs)
        assert status.returncode == 0, status.stdout + status.stderr
        assert "state running" in status.stdout and "chief:0" in status.stdout
        # logs -f follows every task's log with prefixes and ends with the run
        follow = subprocess.run(launch_cmd("logs", run_id, "-f"), cwd=REPO,
                                env=dict(os.environ, **runs), capture_output=True, text=True,
                                timeout=300)
        assert follow.returncode == 0, follow.stderr
        state = state_of(tmp_path, run_id)
        assert state["state"] == "succeeded", state
        lines = follow.stdout.splitlines()
        assert any(line.startswith("[chief:0] ") for line in lines)
        assert any(line.startswith("[ps:0] ") for line in lines)
        # status of the finished run: succeeded, exit 0, with the summary rows
        status = run_launch("status", run_id, env=runs)
        assert status.returncode == 0, status.stdout
        assert "state succeeded" in status.stdout
        assert "reason: training finished and every task ended" in status.stdout
        rows = {line.split()[0]: line for line in status.stdout.splitlines()
                if line.split() and line.split()[0].endswith(":0")}
        assert "stopped (SIGTERM)" in rows["ps:0"] and rows["chief:0"].split()[2] == "0"
        assert state["step"] == 120 and state["max_steps"] == 120   # 3 x 4000 / 100
        assert state["summary"]["status"] == 0
        assert run_launch("logs", run_id, "chief:0", env=runs).stdout.strip()
    assert not wait_gone(timeout=10)


@pytest.mark.tf
def test_a_detached_run_in_its_own_run_dir_is_listed_followed_and_cancelled_by_its_id(
        tmp_path, runs):
    """`--detach --run-dir DIR` outside the run root: the id it printed is all a user
    needs. `launch list` lists the run, `logs -f`, `status` and `cancel` take its id;
    cancel leaves nothing running."""
    own = tmp_path / "elsewhere" / "run"
    with cancelled_on_exit(tmp_path, runs):
        run_id = detach(estimator_spec(tmp_path, epochs=200), runs, "--run-dir", str(own))
        assert (own / "state.json").is_file()
        assert (tmp_path / "runs" / run_id).is_symlink()     # the root lists it by a link
        follow = subprocess.Popen(launch_cmd("logs", run_id, "-f"), cwd=REPO,
                                  env=dict(os.environ, **runs), stdout=subprocess.PIPE,
                                  stderr=subprocess.PIPE, text=True)
        try:
            deadline = time.monotonic() + 240
            while state_of(tmp_path, run_id)["step"] is None:     # training is under way
                assert time.monotonic() < deadline, "no checkpoint within 240 s"
                time.sleep(0.5)
            listed = run_launch("list", env=runs)
            row = next(line for line in listed.stdout.splitlines()
                       if line.startswith(run_id))
            assert row.split()[1:4] == ["estimator", "local", "running"], listed.stdout
            # --root means the run root to every command: the run's own directory's
            # parent lists it, and takes its id
            assert run_id in run_launch("list", "--root", str(own.parent), env=runs).stdout
            status = run_launch("status", run_id, "--root", str(own.parent), env=runs)
            assert "state running" in status.stdout, status.stdout + status.stderr
            doc = status_json(run_id, runs)         # what a program reads, by the same id
            assert (doc["state"], doc["verdict"], doc["max_steps"]) == ("running", None, 8000)
            assert doc["step"] is not None and doc["run_dir"] == str(own)
            assert sorted((t["task"], t["state"]) for t in doc["tasks"]) == \
                [("chief:0", "running"), ("ps:0", "running")]
            assert len(tfcluster_tasks()) == 2
            done = run_launch("cancel", run_id, env=runs, timeout=180)
            assert done.returncode == 0, done.stderr
            assert tfcluster_tasks() == [], "cancel returned with tasks still running"
            out, err = follow.communicate(timeout=60)     # -f ends with the run
        finally:
            if follow.poll() is None:
                follow.kill()
                follow.communicate()
        assert follow.returncode == 0, err
        assert any(line.startswith("[chief:0] ") for line in out.splitlines()), out
        status = run_launch("status", run_id, env=runs)
        assert status.returncode == 1
        assert f"run {run_id}  estimator  backend local  state cancelled" in status.stdout
        assert "reason: cancelled by `launch cancel` (interrupted by SIGTERM)" in status.stdout
        tasks = json.loads((own / "state.json").read_text())["tasks"]
        assert all(t["stopped"] and t["state"] == "stopped (SIGTERM)" for t in tasks), tasks
        doc = status_json(run_id, runs)
        assert doc["state"] == "cancelled" and doc["verdict"]["status"] == 128 + 15
        assert doc["rate"] is None and doc["eta"] is None


def status_json(run_id: str, env: dict) -> dict:
    """`launch status RUN --json`, checked against its published schema."""
    done = run_launch("status", run_id, "--json", env=env)
    assert not done.stderr, done.stderr
    doc = json.loads(done.stdout)
    jsonschema.validate(doc, json.loads((REPO / "cluster_specs" /
                                         "status.schema.json").read_text()))
    return doc


def test_sigkill_of_the_detached_launcher_ends_every_task_and_status_says_so(tmp_path, runs):
    plan = {"chief": "forever", "worker": "spawn-forever", "ps": "forever"}
    spec = tmp_path / "fake.json"
    spec.write_text(json.dumps({
        "name": "fake", "cluster": {"chief": 1, "worker": 1, "ps": 1},
        "command": [sys.executable, FAKE_TASK], "model_dir": str(tmp_path / "model"),
        "max_steps": 10, "check_storage": False, "env": {"FAKE_PLAN": json.dumps(plan)}}))
    with cancelled_on_exit(tmp_path, runs):
        run_id = detach(spec, runs)
        state = state_of(tmp_path, run_id)
        assert state["state"] == "running" and len(tfcluster_tasks()) >= 3
        os.kill(state["launcher"]["pid"], signal.SIGKILL)
        assert not wait_gone(timeout=15), "the watchdog did not end the tasks"
        status = run_launch("status", run_id, env=runs)
        assert status.returncode == 1
        assert "state lost" in status.stdout
        assert (f"the launcher (pid {state['launcher']['pid']} on {state['launcher']['host']}) "
                "died before the run ended") in status.stdout
        assert " gone " in status.stdout


def test_sigterm_to_the_detached_launcher_is_a_preemption_status_reports(tmp_path, runs):
    """The notice reaches a detached run's launcher (a daemon) as an attached one's: its
    chief is asked to save (a stand-in with nothing to save answers so), the tasks stop,
    and the run is recorded preempted, with its preemption record for `launch status`."""
    spec = tmp_path / "fake.json"
    spec.write_text(json.dumps({
        "name": "fake", "cluster": {"chief": 1, "ps": 1},
        "command": [sys.executable, FAKE_TASK], "model_dir": str(tmp_path / "model"),
        "max_steps": 10, "check_storage": False,
        "env": {"FAKE_PLAN": json.dumps({"chief": "forever", "ps": "forever"})}}))
    with cancelled_on_exit(tmp_path, runs):
        run_id = detach(spec, runs)
        state = state_of(tmp_path, run_id)
        deadline = time.monotonic() + 30
        while len(tfcluster_tasks()) < 2 and time.monotonic() < deadline:
            time.sleep(0.1)
        os.kill(state["launcher"]["pid"], signal.SIGTERM)
        ended = wait_state(tmp_path, run_id, ("preempted", "cancelled", "failed"), 60)
        assert ended["state"] == "preempted" and ended["status"] == 75, ended
        assert ended["summary"]["preemption"]["notified"] == ["chief:0"]
        assert not wait_gone(timeout=10)
        status = run_launch("status", run_id, env=runs)
        assert "state preempted" in status.stdout
        assert ("preempted before any step was seen: no checkpoint in model_dir" in
                status.stdout), status.stdout


def test_a_detached_run_outlives_the_terminal_it_was_started_from(tmp_path, runs):
    """A shell on a terminal runs `launch --detach`; the terminal then closes (the shell gets
    SIGHUP and dies): the run goes on, and cancel ends it."""
    import fcntl
    import pty
    import termios

    spec = tmp_path / "fake.json"
    spec.write_text(json.dumps({
        "name": "tty", "cluster": {"chief": 1, "ps": 1}, "command": [sys.executable, FAKE_TASK],
        "model_dir": str(tmp_path / "model"), "max_steps": 10, "check_storage": False,
        "env": {"FAKE_PLAN": json.dumps({"chief": "forever", "ps": "forever"})}}))
    master, slave = pty.openpty()
    script = f"{' '.join(launch_cmd(str(spec), '--detach'))} > {tmp_path / 'out'}; sleep 60"
    shell = subprocess.Popen(["bash", "-c", script], cwd=REPO, stdin=slave, stdout=slave,
                             stderr=slave, start_new_session=True,
                             env=dict(os.environ, **runs),
                             preexec_fn=lambda: fcntl.ioctl(0, termios.TIOCSCTTY, 0))
    os.close(slave)
    with cancelled_on_exit(tmp_path, runs):
        try:
            run_id = wait_for_run_id(tmp_path / "out")
            os.close(master)                        # the terminal goes away
            assert shell.wait(timeout=10) == -signal.SIGHUP
        finally:
            if shell.poll() is None:
                shell.kill()
                shell.wait()
        time.sleep(1)
        status = run_launch("status", run_id, env=runs)
        assert status.returncode == 0 and "state running" in status.stdout, status.stdout
        assert len(tfcluster_tasks()) == 2
        assert run_launch("cancel", run_id, env=runs).returncode == 0
        assert tfcluster_tasks() == []


def wait_for_run_id(path: Path, timeout: float = 60) -> str:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        text = path.read_text() if path.exists() else ""
        if " detached " in text:
            return text.split()[1]
        time.sleep(0.1)
    raise AssertionError(f"launch --detach printed no run id: {text!r}")


def test_a_detached_run_that_cannot_start_says_why_and_exits_2(tmp_path, runs):
    """An error found before every task started (here a port of the spec already taken) is
    printed by `launch --detach` itself, in one line, exit 2; the run is failed and nothing
    runs (docs/runs.md)."""
    with socket.socket() as taken:
        taken.bind(("", 0))
        taken.listen()
        port = taken.getsockname()[1]
        spec = tmp_path / "spec.json"
        spec.write_text(json.dumps({
            "name": "taken", "cluster": {"chief": [f"localhost:{port}"], "ps": ["localhost"]},
            "command": [sys.executable, FAKE_TASK], "model_dir": str(tmp_path / "model"),
            "check_storage": False, "env": {"FAKE_PLAN": json.dumps({"chief": "forever",
                                                                     "ps": "forever"})}}))
        with cancelled_on_exit(tmp_path, runs):
            done = run_launch(str(spec), "--detach", env=runs, timeout=60)
            assert done.returncode == 2, done.stdout + done.stderr
            lines = done.stderr.strip().splitlines()
            assert len(lines) == 1 and f"port {port} is already in use" in lines[0], lines
            assert tfcluster_tasks() == []
            (run_dir,) = (tmp_path / "runs").iterdir()    # `launch status` finds it failed
            assert state_of(tmp_path, run_dir.name)["state"] == "failed"
