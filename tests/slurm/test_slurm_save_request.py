"""The save request at max_steps through Slurm (two slurmd nodes on this machine): a TF1
MonitoredTrainingSession loop with its default save_checkpoint_secs and no
StopAtStepHook, the chief on n1, its worker and ps on n2, one step per node. The notice
reaches the chief through the node step's signal delivery: its checkpoint lands within a
few seconds of training past max_steps, the job succeeds, the allocation is released."""

from __future__ import annotations

import json
import time

import pytest
from support import PY_TF215, run_launch

from launcher.ending import AT_MAX_STEPS
from orchestrator.checkpoints import CheckpointReader

pytestmark = [pytest.mark.tf, pytest.mark.slow]
MAX_STEPS = 800
WINDOW = 1500      # steps: a few seconds of training here, at most


def test_a_tf1_loop_without_a_stop_saves_on_request_through_slurm(tmp_path, slurm_env,
                                                                  slurm_cluster):
    from test_slurm_backend import REPO, released, write_spec

    spec = write_spec(tmp_path, name="slurm-save-request",
                      command=[PY_TF215, str(REPO / "tests" / "ending" / "jobs" /
                                             "tf1_no_stop.py")],
                      max_steps=MAX_STEPS, timeouts={"finish": 30})
    doc = json.loads(spec.read_text())
    del doc["evaluator"]
    spec.write_text(json.dumps(doc))
    run_dir = tmp_path / "run"
    done = run_launch(str(spec), "--run-dir", str(run_dir), env=slurm_env, timeout=300)
    assert done.returncode == 0, done.stderr[-4000:]
    assert f"tfcluster: {AT_MAX_STEPS}: step " in done.stderr
    ckpt = CheckpointReader(str(tmp_path / "model")).newest_complete()
    assert ckpt is not None and ckpt.step is not None
    assert MAX_STEPS <= ckpt.step <= MAX_STEPS + WINDOW, ckpt
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["save_request"]["saved"] and summary["final_step"] == ckpt.step
    deadline = time.monotonic() + 30
    while not released(slurm_cluster) and time.monotonic() < deadline:
        time.sleep(1)
    assert released(slurm_cluster)
