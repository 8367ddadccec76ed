"""`launch report` and the metrics table without a job: bad run dirs, empty runs, and the
events reader on TF2 summaries (tensor scalars, written by TF 2.21)."""

from __future__ import annotations

import json
import os
import subprocess

import pytest
from conftest import PY_TF221, run_launch

from launcher.metrics_table import metrics_table, render_table
from launcher.tfevents import scalars_in_dir
from orchestrator.metrics_file import MetricsRecord, MetricsWriter


def test_table_orders_by_step_and_shows_main_metrics(tmp_path):
    assert metrics_table(str(tmp_path / "no-such-model-dir")) == ""
    w = MetricsWriter(str(tmp_path))
    w.append(MetricsRecord(200, "m/c-200", "train", {"zeta": 1.0, "loss": 0.4}, 3.0))
    w.append(MetricsRecord(200, "m/c-200", "eval", {"auc": 0.8, "loss": 0.5}, 2.0))
    w.append(MetricsRecord(100, "m/c-100", "eval", {"auc": 0.7, "loss": 0.6}, 1.0))
    lines = metrics_table(str(tmp_path)).splitlines()
    assert lines[0].split() == ["step", "split", "loss", "auc", "zeta"]
    assert [line.split()[:2] for line in lines[1:]] == [["100", "eval"], ["200", "eval"],
                                                       ["200", "train"]]
    assert lines[3].split()[2:] == ["0.4000", "-", "1.0000"]
    assert render_table(w.records, max_rows=1).splitlines()[1] == "(2 earlier rows not shown)"


def test_report_of_a_missing_or_foreign_directory_is_a_usage_error(tmp_path):
    done = run_launch("report", str(tmp_path / "nope"))
    assert done.returncode == 2 and "run directory not found" in done.stderr
    done = run_launch("report", str(tmp_path))
    assert done.returncode == 2 and "no plan.json" in done.stderr
    assert not (tmp_path / "report.png").exists()


def test_report_of_a_run_without_data_still_draws(tmp_path):
    plan = {"run_id": "x-1", "name": "x", "model_dir": str(tmp_path / "model"), "tasks": []}
    (tmp_path / "plan.json").write_text(json.dumps(plan))
    done = run_launch("report", str(tmp_path))
    assert done.returncode == 0, done.stderr
    assert (tmp_path / "report.png").read_bytes().startswith(b"\x89PNG")
    page = (tmp_path / "report.html").read_text()
    assert "No checkpoint was evaluated" in page and "no summary" in page


@pytest.mark.tf
def test_events_reader_reads_tf2_tensor_scalars(tmp_path):
    # tf.summary.write: what tf.summary.scalar writes, without needing TensorBoard installed
    code = ("import sys, tensorflow as tf\n"
            "w = tf.summary.create_file_writer(sys.argv[1])\n"
            "with w.as_default():\n"
            "    for step in range(5):\n"
            "        tf.summary.write('loss', 1.0 / (step + 1), step=step)\n"
            "        tf.summary.write('steps', tf.constant(step, tf.int64), step=step)\n"
            "        tf.summary.write('note', 'not a number', step=step)\n"
            "w.close()\n")
    done = subprocess.run([PY_TF221, "-c", code, str(tmp_path)], capture_output=True,
                          text=True, timeout=120,
                          env=dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2"))
    assert done.returncode == 0, done.stderr[-2000:]
    scalars = scalars_in_dir(str(tmp_path))
    loss = [(s.step, s.value) for s in scalars if s.tag == "loss"]
    assert loss == [(i, pytest.approx(1.0 / (i + 1))) for i in range(5)]
    assert [s.value for s in scalars if s.tag == "steps"] == [0, 1, 2, 3, 4]
    assert not [s for s in scalars if s.tag == "note"]
