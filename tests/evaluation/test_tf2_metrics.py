"""The TF2 sidecar evaluator (TF 2.21): a real chief + evaluator job through `launch`, with
checkpoints ``ckpt-N`` whose N is a save counter; a Keras model's checkpoints; and the
TF-free events reader on TF2 summaries (tensor scalars)."""

from __future__ import annotations

import json
import os
import subprocess
from types import SimpleNamespace

import pytest
from support import PY_TF221, REPO, run_launch

from orchestrator.metrics_file import read_metrics
from orchestrator.tfformats import scalars_in_dir

pytestmark = pytest.mark.tf
JOB = REPO / "tests" / "evaluation" / "tf2_job.py"


@pytest.fixture(scope="module")
def job(tmp_path_factory):
    """A chief that trains 200 steps (a checkpoint every 20, 3 kept) and an evaluator; then
    one TF process recomputes the metrics and runs the Keras case. The chief waits after
    each checkpoint until the evaluator recorded it: which checkpoints get evaluated never
    depends on the machine's load."""
    tmp = tmp_path_factory.mktemp("tf2_run")
    spec = {"name": "tf2eval", "cluster": {"chief": 1}, "evaluator": "localhost",
            "command": [PY_TF221, str(JOB)], "model_dir": str(tmp / "model"),
            "max_steps": 200}
    (tmp / "spec.json").write_text(json.dumps(spec))
    done = run_launch(str(tmp / "spec.json"), "--quiet", "--run-dir", str(tmp / "run"),
                      timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    check = subprocess.run([PY_TF221, str(JOB), "check", str(tmp / "model"), str(tmp)],
                           capture_output=True, text=True, timeout=240, cwd=REPO,
                           stdin=subprocess.DEVNULL, env=dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2"))
    assert check.returncode == 0, check.stderr[-3000:]
    return SimpleNamespace(model_dir=str(tmp / "model"), events=str(tmp / "events"),
                           **json.loads(check.stdout.strip().splitlines()[-1]))


def test_sidecar_evaluator_of_a_tf2_job(job):
    records = read_metrics(job.model_dir)
    assert {r.split for r in records} == {"eval"}
    assert [r.step for r in records] == list(range(0, 201, 20))   # every checkpoint, in order
    # the step is the one stored inside, not the save counter in the name
    assert records[-1].checkpoint.endswith("/ckpt-11") and records[-1].step == 200
    assert records[-1].checkpoint in {f["checkpoint"] for f in job.verify}
    by_path = {r.checkpoint: r for r in records}
    for f in job.verify:
        mine = by_path[f["checkpoint"]]
        assert mine.step == f["step"]
        assert mine.metrics == pytest.approx(f["metrics"], abs=1e-4), f["checkpoint"]


def test_keras_sidecar_matches_model_evaluate(job):
    result = job.keras
    assert result["reason"] == "final"
    assert [line["step"] for line in result["lines"]] == [40]     # the newest only
    assert result["lines"][0]["metrics"] == pytest.approx(result["expected"], rel=1e-6)


def test_events_reader_reads_tf2_tensor_scalars(job):
    scalars = scalars_in_dir(job.events)
    loss = [(s.step, s.value) for s in scalars if s.tag == "loss"]
    assert loss == [(i, pytest.approx(1.0 / (i + 1))) for i in range(5)]
    assert [s.value for s in scalars if s.tag == "steps"] == [0, 1, 2, 3, 4]
    assert not [s for s in scalars if s.tag == "note"]
