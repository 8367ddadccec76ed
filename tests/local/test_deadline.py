"""``timeouts.job`` on real processes: the job ends at its deadline, every task stopped (the
ps last), with the reason on stderr and in the run's state."""

from __future__ import annotations

import json
import sys
from pathlib import Path

from support import run_launch, wait_gone

FAKE_TASK = str(Path(__file__).resolve().parent / "fake_task.py")


def test_the_whole_job_deadline_stops_every_task_with_a_clear_reason(tmp_path):
    plan = {"chief": "forever", "worker": "spawn-forever", "ps": "forever"}
    spec = tmp_path / "spec.json"
    spec.write_text(json.dumps({
        "name": "deadline", "cluster": {"chief": 1, "worker": 1, "ps": 1},
        "command": [sys.executable, FAKE_TASK], "model_dir": str(tmp_path / "model"),
        "max_steps": 10, "check_storage": False, "timeouts": {"job": 2, "kill": 2},
        "env": {"FAKE_PLAN": json.dumps(plan)}}))
    run_dir = tmp_path / "run"
    done = run_launch(str(spec), "-q", "--run-dir", str(run_dir), timeout=60)
    assert done.returncode == 1, done.stderr
    reason = "the job's deadline passed (timeouts.job = 2s): every task is stopped"
    assert f": {reason}\n" in done.stderr      # the closing line: job FAILED ...: reason
    state = json.loads((run_dir / "state.json").read_text())
    assert state["state"] == "failed" and state["reason"] == reason
    assert all(t["state"] == "stopped (SIGTERM)" for t in state["tasks"]), state["tasks"]
    assert not wait_gone(timeout=5)
