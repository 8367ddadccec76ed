"""Where no launcher follows the tasks (a Kubernetes pod, docker compose: the notice's
``TFCLUSTER_PREEMPT=URG,TERM``), the chief itself saves and ends at TFCLUSTER_MAX_STEPS:
its CheckpointSaverHook asks the session to stop there, the hooks' ``end()`` saves, and
the script goes on after its loop as if it had ended by itself. Real TensorFlow 2.15, the
task started as a pod starts it (its environment, the site on PYTHONPATH), no launcher:
a stock Estimator without TrainSpec.max_steps and a TF1 MonitoredTrainingSession loop
without StopAtStepHook, both saving every 600 s by default."""

from __future__ import annotations

import json
import os
import socket
import subprocess

import pytest
from support import PY_TF215, REPO

from orchestrator.checkpoints import CheckpointReader
from orchestrator.preemption import AT_MAX_STEPS

pytestmark = [pytest.mark.tf, pytest.mark.slow]
JOBS = REPO / "tests" / "ending" / "jobs"
MAX_STEPS = 300


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("localhost", 0))
        return s.getsockname()[1]


@pytest.mark.parametrize("script", ["estimator_no_max_steps.py", "tf1_no_stop.py"])
def test_a_pod_chief_saves_and_ends_at_max_steps_by_itself(tmp_path, script):
    model = tmp_path / "model"
    tf_config = {"cluster": {"chief": [f"localhost:{free_port()}"]},
                 "task": {"type": "chief", "index": 0}, "model_dir": str(model)}
    env = {k: v for k, v in os.environ.items()
           if not k.startswith("TFCLUSTER_") and k != "PYTHONPATH"}
    env.update(TF_CONFIG=json.dumps(tf_config), TFCLUSTER_PREEMPT="URG,TERM",
               TFCLUSTER_MAX_STEPS=str(MAX_STEPS), TFCLUSTER_TASK_TYPE="chief",
               TFCLUSTER_TASK_INDEX="0", TFCLUSTER_MODEL_DIR=str(model),
               PYTHONPATH=str(REPO / "orchestrator" / "preempt_site"))
    proc = subprocess.run([PY_TF215, str(JOBS / script)], env=env, cwd=tmp_path, text=True,
                          capture_output=True, timeout=240, stdin=subprocess.DEVNULL)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert AT_MAX_STEPS.format(MAX_STEPS) in proc.stderr
    ckpt = CheckpointReader(str(model)).newest_complete()
    assert ckpt is not None and ckpt.step == MAX_STEPS, ckpt
