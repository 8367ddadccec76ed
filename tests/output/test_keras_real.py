"""A real Keras job (tf_keras on TensorFlow 2.21) with ModelCheckpoint's ``ckpt_{epoch}``
names and its progress bar on: the progress and closing lines see its checkpoints (steps
read from them), and the bar reaches the console while an epoch runs, not once per epoch.

Budget: one TensorFlow process, about 25 s on 2 cores."""

from __future__ import annotations

import json
import re

import pytest
from support import PY_TF221, REPO, run_launch

pytestmark = pytest.mark.tf
BAR = re.compile(r"^\[worker:0\]\s+(\d+)/12 \[")


def test_keras_checkpoints_and_bar_are_seen(tmp_path):
    spec = tmp_path / "cluster.json"
    spec.write_text(json.dumps({
        "cluster": {"worker": 1}, "model_dir": str(tmp_path / "model"), "max_steps": 24,
        "command": [PY_TF221, str(REPO / "tests" / "output" / "jobs" / "keras_checkpoints.py")]}))
    proc = run_launch(str(spec), "--run-dir", str(tmp_path / "run"), timeout=240)
    assert proc.returncode == 0, proc.stderr[-3000:]
    progress = [line for line in proc.stderr.splitlines() if "progress: " in line]
    # a progress line names a Keras checkpoint (its step beside the freshest step, which the
    # worker's bar may carry past it: "step 20/24 (83%), from worker:0's output 0s ago,
    # checkpoint ckpt_1"; which step a line catches depends on the machine's load)
    assert any(re.search(r"step \d+/24 .*checkpoint ckpt_[12]$", line) for line in progress), \
        progress
    assert "final checkpoint ckpt_2, 0 steps past max_steps 24" in proc.stderr
    assert "no checkpoint was written" not in proc.stderr
    bars = [int(m.group(1)) for line in proc.stdout.splitlines() if (m := BAR.match(line))]
    assert len([b for b in bars if b < 12]) >= 2, proc.stdout   # states within the epochs
    summary = json.loads((tmp_path / "run" / "summary.json").read_text())
    assert (summary["final_checkpoint"], summary["final_step"]) == ("ckpt_2", 24)
