"""Each example runs as a real local cluster through `launch`, ends with status 0, the ps is
stopped by the launcher and no process of the job is left behind.

The Estimator and PSS examples run with one worker where their specs have two: a second
worker trains as the first (~6 CPU-s a TensorFlow process), and tests/epochs runs both
examples with several trainers, two workers among them in the PSS example's epochs test
and the Estimator example's without-helpers control."""

from __future__ import annotations

import json
import signal
import time
from pathlib import Path

import psutil
import pytest
from support import (
    PY_TF215,
    PY_TF221,
    REPO,
    ended_well,
    launched,
    run_launch,
    tfcluster_tasks,
    wait_gone,
)

pytestmark = pytest.mark.tf


def spec_copy(name: str, tmp_path: Path, **changes) -> Path:
    """The example's spec from cluster_specs/, with a fresh model_dir under tmp_path."""
    spec = json.loads((REPO / "cluster_specs" / f"{name}.json").read_text())
    spec["model_dir"] = str(tmp_path / "model")
    spec.update(changes)
    path = tmp_path / f"{name}.json"
    path.write_text(json.dumps(spec))
    return path


def launch_example(name: str, python: str, tmp_path: Path, **changes):
    spec = spec_copy(name, tmp_path, **changes)
    run_dir = tmp_path / "run"
    proc = run_launch(str(spec), "--quiet", "--run-dir", str(run_dir), "--",
                      python, f"examples/{name}/train.py", timeout=400)
    summary = json.loads((run_dir / "summary.json").read_text())
    return proc, summary


def exits(summary: dict) -> dict[str, tuple]:
    return {t["task"]: (t["exit"], t["stopped"]) for t in summary["tasks"]}


ONE_WORKER = {"chief": ["localhost"], "worker": ["localhost"], "ps": ["localhost"]}


def test_estimator_example(tmp_path):
    proc, summary = launch_example("estimator", PY_TF215, tmp_path, examples=8000,
                                   cluster=ONE_WORKER)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    tasks = exits(summary)
    assert tasks["ps:0"] == (-15, True)          # SIGTERM from the launcher
    for name in ("chief:0", "evaluator:0"):
        assert tasks[name] == (0, False), tasks
    rows = {t["task"]: t for t in summary["tasks"]}
    assert ended_well(rows["worker:0"]), tasks
    assert "stopped (SIGTERM)" in proc.stdout + proc.stderr
    state = (tmp_path / "model" / "checkpoint").read_text()
    assert 'model_checkpoint_path: "model.ckpt-240"' in state   # 3 epochs of 8000 / 100
    assert list((tmp_path / "model" / "export" / "ctr").iterdir())  # the evaluator exported
    metrics = (tmp_path / "model" / "tfcluster_metrics.jsonl").read_text().splitlines()
    assert json.loads(metrics[-1])["step"] == 240            # it evaluated the final model
    gone = [p for p in psutil.process_iter(["environ"])
            if (p.info["environ"] or {}).get("TFCLUSTER_RUN_ID", "").startswith("estimator-")
            and (p.info["environ"] or {}).get("TFCLUSTER_MODEL_DIR") == str(tmp_path / "model")]
    assert gone == [] and tfcluster_tasks() == []


def test_pss_example(tmp_path):
    proc, summary = launch_example("pss", PY_TF221, tmp_path, examples=4000,
                                   cluster=ONE_WORKER)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    tasks = exits(summary)
    assert tasks["chief:0"] == (0, False)
    # ps and worker only serve the coordinator: the launcher stops them
    for name in ("ps:0", "worker:0"):
        assert tasks[name] == (-15, True), tasks
    # 3 epochs of 4000 examples on the one worker, batch 64: 188 steps, saved as ckpt-STEP
    assert (tmp_path / "model" / "ckpt-188.index").exists()
    assert tfcluster_tasks() == []


def test_mwms_example(tmp_path):
    proc, summary = launch_example("mwms", PY_TF221, tmp_path, examples=4000)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert exits(summary) == {"chief:0": (0, False), "worker:0": (0, False)}
    # 2 epochs of 4000 examples, global batch 2 x 64: 63 synchronous steps, chief saves
    assert (tmp_path / "model" / "ckpt-63.index").exists()
    assert not list((tmp_path / "model").glob("*worker*"))
    assert tfcluster_tasks() == []


def test_ctrl_c_in_the_middle_of_a_real_job_leaves_nothing_running(tmp_path):
    """The Estimator example with a chief, one worker and its ps (the evaluator and a second
    worker would only be more of the same to end), interrupted once training is under way."""
    spec = spec_copy("estimator", tmp_path, epochs=50,   # far longer than the test waits
                     cluster=ONE_WORKER, evaluator=None)
    run_dir = tmp_path / "run"
    with launched(str(spec), "--quiet", "--run-dir", str(run_dir), "--", PY_TF215,
                  "examples/estimator/train.py") as proc:
        deadline = time.monotonic() + 240
        while not (tmp_path / "model" / "checkpoint").exists():   # training is under way
            assert proc.poll() is None, proc.communicate()[1][-3000:]
            assert time.monotonic() < deadline, "no checkpoint within 240 s"
            time.sleep(0.5)
        assert len(tfcluster_tasks()) == 3
        proc.send_signal(signal.SIGINT)
        _, err = proc.communicate(timeout=120)
    assert proc.returncode == 130, err[-3000:]
    assert "interrupted by SIGINT" in err
    assert not wait_gone(timeout=10)
    summary = json.loads((run_dir / "summary.json").read_text())
    assert all(t["stopped"] for t in summary["tasks"]), summary["tasks"]
