"""The save request at max_steps over SSH (real hosts: network namespaces with their own
sshd): a TF1 MonitoredTrainingSession loop with its default save_checkpoint_secs and no
StopAtStepHook, chief and ps on h1, a worker on h2. The notice reaches the chief through
the ssh backend's signal delivery: its checkpoint lands within a few seconds of training
past max_steps, the job succeeds, nothing is left on any host (the autouse fixture)."""

from __future__ import annotations

import json

import pytest
from ssh_specs import write_spec
from support import PY_TF215, REPO, run_launch

from launcher.ending import AT_MAX_STEPS
from orchestrator.checkpoints import CheckpointReader

pytestmark = [pytest.mark.tf, pytest.mark.slow]
MAX_STEPS = 800
WINDOW = 1500      # steps: a few seconds of training here, at most


def test_a_tf1_loop_without_a_stop_saves_on_request_over_ssh(hosts, tmp_path):
    spec = write_spec(tmp_path, hosts, {"chief": ["h1"], "ps": ["h1:2290"], "worker": ["h2"]},
                      command=[PY_TF215, str(REPO / "tests" / "ending" / "jobs" /
                                             "tf1_no_stop.py")],
                      max_steps=MAX_STEPS)
    done = run_launch(str(spec), timeout=300)
    assert done.returncode == 0, done.stderr[-4000:]
    assert f"tfcluster: {AT_MAX_STEPS}: step " in done.stderr
    ckpt = CheckpointReader(str(tmp_path / "model")).newest_complete()
    assert ckpt is not None and ckpt.step is not None
    assert MAX_STEPS <= ckpt.step <= MAX_STEPS + WINDOW, ckpt
    (run,) = (tmp_path / "runs").iterdir()
    summary = json.loads((run / "summary.json").read_text())
    assert summary["save_request"]["saved"] and summary["final_step"] == ckpt.step
