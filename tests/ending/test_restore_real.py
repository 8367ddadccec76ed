"""A real TF1 between-graph job (MonitoredTrainingSession, TensorFlow 2.15) whose chief
restores a checkpoint mid-run: the coordinator reads the backward step series as a
restore, and the job never succeeds while its newest checkpoint is short of max_steps.

Budget: one job of 1 TensorFlow process (the chief alone: the restore and the ending are
its own; a ps would add a process and nothing to look at), about 15 s on 2 cores."""

from __future__ import annotations

import json

import pytest
from support import PY_TF215, REPO, run_launch

pytestmark = pytest.mark.tf


def test_a_restored_chief_stopped_short_of_max_steps_is_not_a_success(tmp_path):
    spec = tmp_path / "cluster.json"
    spec.write_text(json.dumps({
        "cluster": {"chief": 1}, "model_dir": str(tmp_path / "model"),
        "command": [PY_TF215, str(REPO / "tests" / "ending" / "jobs" / "tf1_restore.py")],
        # a checkpoint every 30 steps, the error at step 35 restores model.ckpt-30; the
        # events then reach max_steps 40 well before the next checkpoint (60)
        "env": {"SAVE_EVERY": "30", "ABORT_AT": "35"},
        # the save request at max_steps off (it rides on the notice): the launcher ends
        # training from the events file alone, as it does for a chief that cannot save
        "max_steps": 40, "timeouts": {"finish": 1, "preempt": 0}}))
    run_dir = tmp_path / "run"
    proc = run_launch(str(spec), "--run-dir", str(run_dir), timeout=180)
    events = [json.loads(line) for line in (run_dir / "events.jsonl").read_text().splitlines()]
    summary = json.loads((run_dir / "summary.json").read_text())
    restores = [e for e in events if e["event"] == "restore"]
    assert restores and restores[0]["restored_to"] == 30, proc.stderr[-3000:]
    assert summary["final_step"] < 40                 # stopped before model.ckpt-60
    assert proc.returncode == 1, proc.stderr[-3000:]
    assert summary["training"] == "stopped short"
    assert "job FAILED (exit status 1)" in proc.stderr
    assert "the newest complete checkpoint model.ckpt-30 is short of max_steps 40, and " \
           "chief:0 did not exit 0 by itself" in proc.stderr
