"""The TF2 sidecar evaluator (TF 2.21): a real chief + evaluator job through `launch`, with
checkpoints ``ckpt-N`` whose N is a save counter; and a Keras model's checkpoints."""

from __future__ import annotations

import json
import os
import subprocess

import pytest
from conftest import PY_TF221, REPO, run_launch

from orchestrator.metrics_file import read_metrics

pytestmark = pytest.mark.tf
JOB = REPO / "tests" / "evaluation" / "tf2_job.py"


def tf2(*args: str) -> dict | list:
    done = subprocess.run([PY_TF221, str(JOB), *args], capture_output=True, text=True,
                          timeout=180, cwd=REPO, stdin=subprocess.DEVNULL,
                          env=dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2"))
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


def test_sidecar_evaluator_of_a_tf2_job(tmp_path):
    spec = {"name": "tf2eval", "cluster": {"chief": 1}, "evaluator": "localhost",
            "command": [PY_TF221, str(JOB)], "model_dir": str(tmp_path / "model"),
            "max_steps": 200}
    (tmp_path / "spec.json").write_text(json.dumps(spec))
    done = run_launch(str(tmp_path / "spec.json"), "--quiet", "--run-dir",
                      str(tmp_path / "run"), timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    records = read_metrics(str(tmp_path / "model"))
    assert len(records) >= 2 and {r.split for r in records} == {"eval"}
    steps = [r.step for r in records]
    assert steps == sorted(steps) and steps[-1] >= 200
    # the step is the one stored inside, not the save counter in the name
    assert records[-1].checkpoint.endswith("/ckpt-11") and records[-1].step == 200
    fresh = tf2("verify", str(tmp_path / "model"))
    assert records[-1].checkpoint in {f["checkpoint"] for f in fresh}
    by_path = {r.checkpoint: r for r in records}
    for f in fresh:
        mine = by_path[f["checkpoint"]]
        assert mine.step == f["step"]
        assert mine.metrics == pytest.approx(f["metrics"], abs=1e-4), f["checkpoint"]


def test_keras_sidecar_matches_model_evaluate(tmp_path):
    result = tf2("keras", str(tmp_path / "model"))
    assert result["reason"] == "final"
    assert [line["step"] for line in result["lines"]] == [40]     # the newest only
    assert result["lines"][0]["metrics"] == pytest.approx(result["expected"], rel=1e-6)
