"""A real Estimator job (chief, ps, evaluator; TF 2.15) through `launch`: the metrics file,
its table, `launch report`, and the offline evaluation of the exported model.

After the job, one TF process (estimator_job.py check) evaluates the checkpoints afresh,
exports the model, reads the events with TensorFlow and meets deleted checkpoints: one
TensorFlow start instead of four keeps this module inside its time budget."""

from __future__ import annotations

import base64
import json
import os
import re
import subprocess
from pathlib import Path
from types import SimpleNamespace

import pytest
from support import PY_TF215, REPO, run_launch

from orchestrator.metrics_file import read_metrics
from orchestrator.tfformats import scalars_in_dir

pytestmark = pytest.mark.tf
JOB = REPO / "tests" / "evaluation" / "estimator_job.py"
MAX_STEPS = 400
SAVE_STEPS = 100


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    """One job for the whole module: 400 steps, a checkpoint every 100, only 3 kept. The
    chief waits after each checkpoint until the evaluator recorded it (JOB_EVALUATE_EACH):
    which checkpoints get evaluated never depends on the machine's load."""
    tmp = tmp_path_factory.mktemp("estimator_run")
    spec = {
        "name": "evaltest",
        "cluster": {"chief": 1, "ps": 1},
        "evaluator": "localhost",
        "command": [PY_TF215, str(JOB)],
        "model_dir": str(tmp / "model"),
        "max_steps": MAX_STEPS,
        "env": {"JOB_STEP_SLEEP": "0.03", "JOB_SAVE_STEPS": str(SAVE_STEPS), "JOB_KEEP": "3",
                "JOB_EVALUATE_EACH": "1"},
    }
    (tmp / "spec.json").write_text(json.dumps(spec))
    proc = run_launch(str(tmp / "spec.json"), "--quiet", "--run-dir", str(tmp / "run"),
                      timeout=420)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return SimpleNamespace(proc=proc, tmp=tmp, model_dir=str(tmp / "model"),
                           run_dir=str(tmp / "run"))


@pytest.fixture(scope="module")
def checked(run) -> dict:
    """What TensorFlow itself says about the run's model_dir (see the module doc)."""
    work = run.tmp / "check"
    work.mkdir()
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2")
    done = subprocess.run([PY_TF215, str(JOB), "check", run.model_dir, str(work)],
                          capture_output=True, text=True, timeout=300, env=env, cwd=REPO,
                          stdin=subprocess.DEVNULL)
    assert done.returncode == 0, done.stderr[-3000:]
    result = json.loads(done.stdout.strip().splitlines()[-1])
    result["work"] = work
    return result


def test_metrics_file_holds_a_fresh_evaluation_of_each_checkpoint(run, checked):
    lines = Path(run.model_dir, "tfcluster_metrics.jsonl").read_text().splitlines()
    raw = [json.loads(line) for line in lines]
    assert all(set(d) == {"step", "checkpoint", "split", "metrics", "time"} for d in raw)
    records = read_metrics(run.model_dir)
    evals = [r for r in records if r.split == "eval"]
    trains = [r for r in records if r.split == "train"]
    # one line per checkpoint (0, 100, ... 400) and split, in step order, ending at
    # max_steps; a checkpoint deleted (keep 3) between its eval and train evaluation has no
    # train line
    assert [r.step for r in evals] == list(range(0, MAX_STEPS + 1, SAVE_STEPS))
    assert len({r.checkpoint for r in evals}) == len(evals)
    assert len({r.checkpoint for r in trains}) == len(trains)
    assert {r.checkpoint for r in trains} <= {r.checkpoint for r in evals}
    assert trains[-1].checkpoint == evals[-1].checkpoint
    assert [r.step for r in evals] == sorted(r.step for r in evals)
    assert evals[-1].step >= MAX_STEPS
    assert {"accuracy", "auc", "loss"} <= set(evals[-1].metrics)
    # it learned: the untrained model of step 0 against the final one
    assert evals[-1].metrics["accuracy"] != evals[0].metrics["accuracy"]
    assert evals[-1].metrics["loss"] < evals[0].metrics["loss"]

    fresh = checked["verify"]
    assert fresh, "no evaluated checkpoint is left to check"
    assert evals[-1].checkpoint in {f["checkpoint"] for f in fresh}
    by_key = {(r.checkpoint, r.split): r for r in records}
    for f in fresh:
        mine = by_key[(f["checkpoint"], f["split"])]
        assert mine.step == f["step"]
        assert mine.metrics == pytest.approx(f["metrics"], rel=1e-6, abs=1e-7), f["checkpoint"]


def test_launch_prints_the_metrics_table_at_the_end(run):
    err = run.proc.stderr
    assert "metrics of each checkpoint" in err
    table = err[err.index("metrics of each checkpoint"):]
    assert re.search(r"step\s+split\s+loss\s+accuracy\s+auc", table)
    final = read_metrics(run.model_dir)[-1]
    assert re.search(rf"^\s*{final.step}\s+{final.split}\s", table, re.M)


def test_evaluator_skips_checkpoints_deleted_under_it(checked):
    result = checked["deleted"]
    assert result["skipped"] == result["old"]          # data gone / index gone: both skipped
    assert result["reason"] == "final"                 # and it went on to the newest one
    assert result["steps"] == [int(result["final"].rsplit("-", 1)[1])]
    assert result["mismatch"] == "NotFoundError"       # a wrong checkpoint is not hidden


def test_report_draws_loss_and_metrics(run):
    done = run_launch("report", run.run_dir, timeout=120)
    assert done.returncode == 0, done.stderr
    png = Path(run.run_dir, "report.png").read_bytes()
    assert png.startswith(b"\x89PNG\r\n\x1a\n") and len(png) > 20_000
    page = Path(run.run_dir, "report.html").read_text()
    assert base64.b64encode(png).decode() in page          # self-contained
    final = [r for r in read_metrics(run.model_dir) if r.split == "eval"][-1]
    assert f"<td>{final.step}</td><td>eval</td>" in page
    assert "job succeeded" in page or "training finished" in page
    loss_points = int(re.search(r"(\d+) loss points", done.stdout).group(1))
    assert loss_points == len([s for s in scalars_in_dir(run.model_dir) if s.tag == "loss"])
    assert loss_points >= 10


def test_events_reader_agrees_with_tensorflow(run, checked):
    mine = [(s.step, s.value) for s in scalars_in_dir(run.model_dir) if s.tag == "loss"]
    theirs = [tuple(p) for p in checked["events"]]
    assert len(mine) >= 10
    assert sorted(mine) == theirs


def test_offline_evaluation_of_the_exported_model(run, checked, tmp_path):
    work = checked["work"]
    assert Path(checked["export"], "saved_model.pb").exists()
    done = run_launch("evaluate", "--model", str(work / "export"), "--data",
                      str(work / "eval.csv"), "--json", "--python", PY_TF215,
                      "--predictions", str(tmp_path / "pred.csv"), timeout=180)
    assert done.returncode == 0, done.stderr[-3000:]
    result = json.loads(done.stdout.strip().splitlines()[-1])
    pairs = [line.split(",") for line in (tmp_path / "pred.csv").read_text().splitlines()[1:]]
    labels = [int(y) for y, _ in pairs]
    probs = [float(p) for _, p in pairs]
    assert result["examples"] == len(labels) == 500

    # an independent AUC: every (positive, negative) pair, ties count one half
    pos = [p for y, p in zip(labels, probs) if y == 1]
    neg = [p for y, p in zip(labels, probs) if y == 0]
    wins = sum(1.0 if a > b else 0.5 if a == b else 0.0 for a in pos for b in neg)
    assert result["auc"] == pytest.approx(wins / (len(pos) * len(neg)), abs=1e-12)

    # the exported model is the final checkpoint: same numbers as the evaluator's
    final = [r for r in read_metrics(run.model_dir) if r.split == "eval"][-1]
    assert result["accuracy"] == pytest.approx(final.metrics["accuracy"], abs=1e-6)
    assert result["log_loss"] == pytest.approx(final.metrics["average_loss"], rel=1e-4)
    assert result["auc"] == pytest.approx(final.metrics["auc"], abs=5e-3)  # TF: 200 buckets
