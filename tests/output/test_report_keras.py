"""`launch report` finds the events Keras' TensorBoard callback writes (train/, validation/),
and without matplotlib still writes the HTML page with the data."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from support import PY_TF215, REPO, run_launch

FIT = Path(__file__).resolve().parent / "keras_tensorboard.py"
NO_MATPLOTLIB = ("import sys; sys.modules['matplotlib'] = None; from launcher.cli import main; "
                 "sys.exit(main(sys.argv[1:]))")


@pytest.mark.tf
def test_report_of_a_keras_run_with_and_without_matplotlib(tmp_path):
    model_dir = tmp_path / "model"
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2")
    done = subprocess.run([PY_TF215, str(FIT), str(model_dir)], env=env, capture_output=True,
                          text=True, timeout=240)
    assert done.returncode == 0, done.stderr[-2000:]
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    (run_dir / "plan.json").write_text(json.dumps(
        {"name": "keras", "run_id": "keras-1", "model_dir": str(model_dir), "max_steps": None,
         "tasks": []}))

    done = run_launch("report", str(run_dir))
    assert done.returncode == 0, done.stderr
    assert "report of keras-1: 4 loss points, 4 validation points" in done.stdout
    assert (run_dir / "report.png").read_bytes().startswith(b"\x89PNG")

    out = tmp_path / "plain"
    done = subprocess.run([sys.executable, "-c", NO_MATPLOTLIB, "report", str(run_dir),
                           "--out", str(out)], capture_output=True, text=True, timeout=60,
                          env=dict(os.environ, PYTHONPATH=str(REPO)))
    assert done.returncode == 0, done.stderr
    assert "no PNG: matplotlib is not installed for this Python; pip install " \
           "'tfcluster[report]'" in done.stdout
    assert not (out / "report.png").exists()
    page = (out / "report.html").read_text()
    assert "<h2>Loss against epoch</h2>" in page and "validation" in page
    assert page.count("<tr><td>") >= 8            # 4 training + 4 validation points
