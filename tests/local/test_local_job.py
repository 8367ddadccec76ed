"""The local backend and the job loop, with stand-in tasks (no TensorFlow): the end of a job,
failures, interruption, logs and the summary."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest
from support import launch_cmd, run_launch, tfcluster_tasks, wait_gone

from launcher.signals import PREEMPTED
from orchestrator.preemption import NOTHING_TO_SAVE

FAKE = str(Path(__file__).with_name("fake_task.py"))


def write_spec(tmp_path: Path, **overrides) -> Path:
    doc = {"name": "fake", "cluster": {"chief": 1, "worker": 2, "ps": 1},
           "evaluator": "localhost", "command": [sys.executable, FAKE],
           "model_dir": str(tmp_path / "model"), "max_steps": 10,
           "run_dir": str(tmp_path / "runs"), "timeouts": {"kill": 2, "finish": 5}}
    doc.update(overrides)
    path = tmp_path / "cluster.json"
    path.write_text(json.dumps(doc))
    return path


def run_dir_of(tmp_path: Path) -> Path:
    (run,) = (tmp_path / "runs").iterdir()
    return run


def summary(tmp_path: Path) -> dict[str, dict]:
    doc = json.loads((run_dir_of(tmp_path) / "summary.json").read_text())
    return {row["task"]: row for row in doc["tasks"]}


def test_success_stops_the_ps_and_keeps_logs(tmp_path):
    spec = write_spec(tmp_path, env={"FAKE_PLAN": json.dumps({"ps": "forever"})})
    done = run_launch(str(spec))
    assert done.returncode == 0, done.stderr
    rows = summary(tmp_path)
    assert rows["ps:0"]["stopped"] and rows["ps:0"]["exit"] == -signal.SIGTERM
    assert all(rows[n]["exit"] == 0 for n in ("chief:0", "worker:0", "worker:1", "evaluator:0"))
    assert "[worker:1] hello from worker:1" in done.stdout
    assert "job succeeded after" in done.stderr and "stopped (SIGTERM)" in done.stderr
    log = run_dir_of(tmp_path) / "logs" / "worker-1.log"
    assert "hello from worker:1" in log.read_text()
    events = [json.loads(line)["event"]
              for line in (run_dir_of(tmp_path) / "events.jsonl").read_text().splitlines()]
    assert events[0] == "job_started" and events[-1] == "job_ended"


def test_failing_chief_fails_the_job_and_shows_its_error(tmp_path):
    plan = {"chief": "fail after 0.3", "ps": "forever", "worker": "forever"}
    done = run_launch(str(write_spec(tmp_path, env={"FAKE_PLAN": json.dumps(plan)})))
    assert done.returncode == 1
    assert "chief:0 failed with exit status 1" in done.stderr
    assert "RuntimeError: chief:0 broke on purpose" in done.stderr
    rows = summary(tmp_path)
    assert rows["worker:0"]["stopped"] and rows["ps:0"]["stopped"]


def test_failing_worker_fails_the_job(tmp_path):
    plan = {"chief": "forever", "ps": "forever", "worker:1": "exit 3 after 0.3"}
    done = run_launch(str(write_spec(tmp_path, env={"FAKE_PLAN": json.dumps(plan)})))
    assert done.returncode == 1, done.stderr
    assert "worker:1 failed with exit status 3" in done.stderr, done.stderr


def test_evaluator_gets_bounded_time_and_children_are_stopped(tmp_path):
    pids = tmp_path / "pids"
    pids.mkdir()
    plan = {"ps": "forever", "evaluator": "spawn-forever"}
    spec = write_spec(tmp_path, env={"FAKE_PLAN": json.dumps(plan), "FAKE_PIDS": str(pids)},
                      timeouts={"kill": 2, "finish": 5, "evaluator": 1})
    done = run_launch(str(spec))
    assert done.returncode == 0, done.stderr
    assert summary(tmp_path)["evaluator:0"]["stopped"]
    assert not wait_gone(timeout=5)


def test_command_after_double_dash_replaces_the_spec_command(tmp_path):
    spec = write_spec(tmp_path, command=["false"], env={"FAKE_PLAN": '{"ps": "forever"}'})
    done = run_launch(str(spec), "--", sys.executable, FAKE, "a b", "$(echo x)")
    assert done.returncode == 0, done.stderr
    assert "argv=['a b', '$(echo x)']" in done.stdout


def _wait_for_every_hello(tmp_path: Path) -> None:
    """Every task's first line is in its log: a notice sent earlier can land in the middle of
    the fake task's print (its text, then its newline), and the answer glues onto it."""
    def greeted() -> int:
        logs = list((tmp_path / "runs").glob("*/logs/*.log"))
        return sum("hello from" in log.read_text(errors="replace") for log in logs)
    deadline = time.monotonic() + 60
    while greeted() < 5 and time.monotonic() < deadline:
        time.sleep(0.1)
    assert greeted() == 5 and len(tfcluster_tasks()) == 5


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM])
def test_interrupting_launch_ends_every_task(tmp_path, sig):
    plan = {"chief": "forever", "worker": "forever", "ps": "forever", "evaluator": "forever"}
    spec = write_spec(tmp_path, env={"FAKE_PLAN": json.dumps(plan)})
    proc = subprocess.Popen(launch_cmd(str(spec)), stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    _wait_for_every_hello(tmp_path)
    proc.send_signal(sig)
    out, err = proc.communicate(timeout=30)
    if sig == signal.SIGTERM:   # a preemption notice: the chief says it has nothing to save
        assert proc.returncode == PREEMPTED, err
        assert f"[chief:0] {NOTHING_TO_SAVE}" in out + err
        assert "preempted by SIGTERM; nothing in chief:0 saves on a notice" in err
    else:
        assert proc.returncode == 128 + sig
        assert f"interrupted by {signal.Signals(sig).name}" in err
    assert not wait_gone(timeout=5)


def test_under_nohup_a_hangup_does_not_stop_the_run(tmp_path):
    """`nohup launch spec.json &`, then the user logs out: the launcher was started with
    SIGHUP ignored and keeps it so (launcher/signals.py); the run goes on, and SIGTERM
    still stops it cleanly."""
    plan = {"chief": "forever", "worker": "forever", "ps": "forever", "evaluator": "forever"}
    spec = write_spec(tmp_path, env={"FAKE_PLAN": json.dumps(plan)})
    proc = subprocess.Popen(["nohup", *launch_cmd(str(spec))], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, cwd=tmp_path)
    try:
        deadline = time.monotonic() + 30
        while len(tfcluster_tasks()) < 5 and time.monotonic() < deadline:
            time.sleep(0.1)
        assert len(tfcluster_tasks()) == 5
        proc.send_signal(signal.SIGHUP)
        time.sleep(2)
        assert proc.poll() is None and len(tfcluster_tasks()) == 5, "the hangup stopped it"
        proc.send_signal(signal.SIGTERM)
        _, err = proc.communicate(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == PREEMPTED, err
    assert "preempted by SIGTERM" in err
    assert not wait_gone(timeout=5)


def test_launcher_killed_with_sigkill_takes_its_tasks_along(tmp_path):
    plan = {"chief": "forever", "worker": "forever", "ps": "forever", "evaluator": "forever"}
    spec = write_spec(tmp_path, env={"FAKE_PLAN": json.dumps(plan)})
    proc = subprocess.Popen(launch_cmd(str(spec)), stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 30
    while len(tfcluster_tasks()) < 5 and time.monotonic() < deadline:
        time.sleep(0.1)
    proc.kill()
    proc.wait()
    assert not wait_gone(timeout=10)


def test_bad_spec_starts_nothing_and_writes_nothing(tmp_path):
    spec = write_spec(tmp_path, cluster={"chief": 2})
    done = run_launch(str(spec))
    assert done.returncode == 2
    assert done.stderr.strip().splitlines() == [
        f"launch: error: {spec}: cluster.chief: at most one chief task, got 2"]
    assert not (tmp_path / "model").exists() and not (tmp_path / "runs").exists()


def test_dry_run_json_lists_every_task_and_hides_secrets(tmp_path):
    spec = write_spec(tmp_path, env={"AWS_SECRET_ACCESS_KEY": "hunter2", "MODE": "x"})
    done = run_launch(str(spec), "--dry-run", "--json")
    assert done.returncode == 0, done.stderr
    doc = json.loads(done.stdout)
    assert [(t["type"], t["index"]) for t in doc["tasks"]] == [
        ("ps", 0), ("chief", 0), ("worker", 0), ("worker", 1), ("evaluator", 0)]
    for task in doc["tasks"]:
        assert set(task) >= {"type", "index", "host", "port", "command", "env"}
        assert json.loads(task["env"]["TF_CONFIG"])["task"]["type"] == task["type"]
        assert task["env"]["MODE"] == "x"
    assert "hunter2" not in done.stdout
    assert not (tmp_path / "runs").exists()
    text = run_launch(str(spec), "--dry-run")
    assert "hunter2" not in text.stdout and "TF_CONFIG=" in text.stdout


def test_launcher_does_not_import_tensorflow():
    code = ("import sys, launcher.cli as c, launcher.job, launcher.backends.local;"
            "print(any(m == 'tensorflow' or m.startswith('tensorflow.') for m in sys.modules))")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert done.stdout.strip() == "False"


def test_no_task_process_outlives_a_run(tmp_path):
    pids = tmp_path / "pids"
    pids.mkdir()
    spec = write_spec(tmp_path, env={"FAKE_PLAN": json.dumps({"ps": "forever"}),
                                     "FAKE_PIDS": str(pids)})
    assert run_launch(str(spec)).returncode == 0
    started = [int(p.read_text()) for p in pids.iterdir()]
    assert len(started) == 5
    assert not [p for p in started if psutil.pid_exists(p)
                and psutil.Process(p).status() != psutil.STATUS_ZOMBIE]
    assert os.listdir(run_dir_of(tmp_path) / "logs")


def test_local_flag_runs_a_remote_spec_here(tmp_path):
    spec = write_spec(tmp_path, backend="ssh",
                      cluster={"chief": ["h1.example"], "worker": ["h2.example:2300"],
                               "ps": ["h3.example"]},
                      env={"FAKE_PLAN": json.dumps({"ps": "forever"})})
    done = run_launch(str(spec), "--local", "--dry-run", "--json")
    assert done.returncode == 0, done.stderr
    tasks = json.loads(done.stdout)["tasks"]
    assert {t["host"] for t in tasks} == {"localhost"}
    assert [t["port"] for t in tasks if t["type"] == "worker"] == [2300]
    cluster = json.loads(tasks[0]["env"]["TF_CONFIG"])["cluster"]
    assert cluster["worker"] == ["localhost:2300"]
    assert run_launch(str(spec), "--local").returncode == 0
