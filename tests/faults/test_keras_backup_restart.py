"""A real MultiWorkerMirroredStrategy job (TensorFlow 2.21, tf_keras) whose worker is
SIGKILLed mid-training: the launcher stops its peer for the cluster restart (TensorFlow
takes seconds to exit, longer than the 1 s back-off), restarts both, and Keras'
BackupAndRestore resumes from its backup; the job ends 0 with the default timeouts
(the launcher once crashed with a TypeError there)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from support import PY_TF221, events, run_dir, run_launch

pytestmark = [pytest.mark.tf, pytest.mark.slow]
# The preemption tests' Keras job, 4 epochs of 3 steps, worker:1 killed after epoch 1's backup
SCRIPT = str(Path(__file__).parents[1] / "preemption" / "jobs" / "keras_mwms_backup.py")
ENV = {"STEPS_PER_EPOCH": "3", "EPOCHS": "4", "PACE_SECS": "0", "KILL_AFTER_EPOCH": "1"}


def test_a_killed_mwms_worker_restarts_the_cluster_and_keras_resumes_from_its_backup(
        tmp_path):
    spec = tmp_path / "spec.json"
    spec.write_text(json.dumps({
        "name": "keras-backup", "cluster": {"worker": 2}, "strategy": "multi_worker_mirrored",
        "command": [PY_TF221, SCRIPT], "env": ENV, "model_dir": str(tmp_path / "model"),
        "run_dir": str(tmp_path / "runs")}))
    done = run_launch(str(spec), timeout=400)
    assert done.returncode == 0, done.stderr
    assert "Traceback" not in done.stderr
    assert "worker:1 was killed by SIGKILL; restarting the whole cluster from the newest " \
           "checkpoint in 1s (restart 1 of 3)" in done.stderr
    log = events(tmp_path)
    assert [(e["task"], e["scope"]) for e in log if e["event"] == "restart_scheduled"] == \
        [("worker:1", "cluster")]
    # both workers started, then both again after the restart (the local backend starts
    # tasks from a pool of threads, so the two of one attempt may come in either order)
    started = [e["task"] for e in log if e["event"] == "task_started"]
    assert sorted(started[:2]) == sorted(started[2:]) == ["worker:0", "worker:1"]
    for task in ("worker-0", "worker-1"):
        text = (run_dir(tmp_path) / "logs" / f"{task}.log").read_text()
        assert "epoch 1 begins (restart 0)" in text
        # resumed from the backup of epoch 1, not from the start
        assert "epoch 2 begins (restart 1)" in text and "begins (restart 1)" not in \
            text.split("epoch 2 begins (restart 1)")[0]
        assert "training done" in text
    rows = json.loads((run_dir(tmp_path) / "summary.json").read_text())["tasks"]
    assert [(r["task"], r["exit"], r["restarts"]) for r in rows] == \
        [("worker:0", 0, 1), ("worker:1", 0, 1)]
