"""The save request at max_steps on the docker backend (a real engine, a container per task):
a TF1 MonitoredTrainingSession loop with its default save_checkpoint_secs and no
StopAtStepHook (tests/ending/jobs/tf1_no_stop.py, run from a folder bind-mounted into every
container), chief and ps and a worker. The notice reaches the chief's container through the
docker backend's signal delivery (SIGURG, the image's preemption site): its checkpoint
lands within a few seconds of training past max_steps, the job succeeds, and no container
is left (the autouse fixture)."""

from __future__ import annotations

import json
import shutil

import pytest
from docker_support import docker_spec
from support import REPO, run_launch

from launcher.ending import AT_MAX_STEPS
from orchestrator.checkpoints import CheckpointReader

pytestmark = [pytest.mark.tf, pytest.mark.slow]
MAX_STEPS = 800
WINDOW = 1500      # steps: a few seconds of training here, at most


def test_a_tf1_loop_without_a_stop_saves_on_request_in_containers(engine, image, tmp_path):
    shared = tmp_path / "shared"
    shared.mkdir()
    job = shared / "tf1_no_stop.py"
    shutil.copy(REPO / "tests" / "ending" / "jobs" / "tf1_no_stop.py", job)
    spec = tmp_path / "spec.json"
    spec.write_text(json.dumps(docker_spec(
        str(shared / "model"), [f"{shared}:{shared}"], max_steps=MAX_STEPS,
        cluster={"chief": ["localhost"], "worker": ["localhost"], "ps": ["localhost"]},
        evaluator=None, command=["python", str(job)], run_dir=str(tmp_path / "runs"))))
    done = run_launch(str(spec), timeout=420)
    assert done.returncode == 0, done.stderr[-4000:]
    assert f"tfcluster: {AT_MAX_STEPS}: step " in done.stderr
    ckpt = CheckpointReader(str(shared / "model")).newest_complete()
    assert ckpt is not None and ckpt.step is not None
    assert MAX_STEPS <= ckpt.step <= MAX_STEPS + WINDOW, ckpt
    (run,) = (tmp_path / "runs").iterdir()
    summary = json.loads((run / "summary.json").read_text())
    assert summary["save_request"]["saved"] and summary["final_step"] == ckpt.step
    assert "(saved on request at max_steps)" in done.stderr
