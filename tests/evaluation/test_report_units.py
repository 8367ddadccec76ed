"""`launch report`, the metrics table and `launch evaluate` without a job: bad run dirs,
empty runs, bad evaluate arguments (exit 2, one message, before TensorFlow starts)."""

from __future__ import annotations

import json

from support import run_launch

from launcher.model_dir import ModelDir
from launcher.output.metrics_table import metrics_table, render_table
from orchestrator.metrics_file import MetricsRecord, MetricsWriter


def test_table_orders_by_step_and_shows_main_metrics(tmp_path):
    assert metrics_table(ModelDir(str(tmp_path / "no-such-model-dir"))) == ""
    w = MetricsWriter(str(tmp_path))
    w.append(MetricsRecord(200, "m/c-200", "train", {"zeta": 1.0, "loss": 0.4}, 3.0))
    w.append(MetricsRecord(200, "m/c-200", "eval", {"auc": 0.8, "loss": 0.5}, 2.0))
    w.append(MetricsRecord(100, "m/c-100", "eval", {"auc": 0.7, "loss": 0.6}, 1.0))
    lines = metrics_table(ModelDir(str(tmp_path))).splitlines()
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


def test_report_out_that_is_a_file_is_a_usage_error(tmp_path):
    (tmp_path / "plan.json").write_text(json.dumps({"run_id": "x-1", "name": "x",
                                                    "model_dir": str(tmp_path), "tasks": []}))
    (tmp_path / "a-file").write_text("x")
    for out, words in ((tmp_path / "a-file", "a file, not a folder"),
                       (tmp_path / "a-file" / "sub", "Not a directory")):
        done = run_launch("report", str(tmp_path), "--out", str(out))
        assert done.returncode == 2 and f"--out {out}: {words}" in done.stderr, done.stderr
        assert "Traceback" not in done.stderr and "launcher error" not in done.stderr
    assert (tmp_path / "a-file").read_text() == "x"


def test_report_of_a_run_without_data_still_draws(tmp_path):
    plan = {"run_id": "x-1", "name": "x", "model_dir": str(tmp_path / "model"), "tasks": []}
    (tmp_path / "plan.json").write_text(json.dumps(plan))
    done = run_launch("report", str(tmp_path))
    assert done.returncode == 0, done.stderr
    assert (tmp_path / "report.png").read_bytes().startswith(b"\x89PNG")
    page = (tmp_path / "report.html").read_text()
    assert "No checkpoint was evaluated" in page and "no summary" in page


def test_evaluate_bad_input_is_one_message_and_exit_2(tmp_path):
    model = tmp_path / "export" / "1700000000"
    model.mkdir(parents=True)
    (model / "saved_model.pb").write_bytes(b"")
    data = tmp_path / "data.csv"
    data.write_text("x,label\n0.5,1\n")
    cases = [
        (["--model", str(tmp_path / "none"), "--data", str(data)], "no such directory"),
        (["--model", str(tmp_path), "--data", str(data)], "holds no saved_model.pb"),
        (["--model", str(model.parent), "--data", str(tmp_path / "x.csv")], "file not found"),
        (["--model", str(model), "--data", str(data), "--label", "y"], "no label column 'y'"),
        (["--model", str(model), "--data", str(data), "--python", str(tmp_path / "py")],
         "cannot run"),
        (["--model", str(model)], "required: --data"),
    ]
    for args, message in cases:
        done = run_launch("evaluate", *args, timeout=60)
        assert done.returncode == 2, (args, done.stderr)
        assert message in done.stderr, (args, done.stderr)
        assert "Traceback" not in done.stderr


def test_the_page_says_what_the_console_says():
    """TensorFlow's own evaluator's results (eval/ events) without a metrics file: the page
    does not say nothing was evaluated; a task the launcher stopped reads as on the
    console, not as its raw exit status."""
    from launcher.commands.report import RunData, render_html
    from orchestrator.tfformats import Scalar

    data = RunData("run", "model", summary={"tasks": [
        {"task": "ps:0", "exit": -15, "status": "stopped (SIGTERM)", "stopped": True,
         "duration": 3.0},
        {"task": "chief:0", "exit": 0, "status": "0", "duration": 3.0}]},
        validation=[Scalar("loss", 500, 0.6, 1.0), Scalar("loss", 1001, 0.5, 2.0)])
    page = render_html(data, None)
    assert "No checkpoint was evaluated." not in page
    assert "the validation series below holds 2 evaluations (TensorFlow&#x27;s evaluator, or " \
           "Keras&#x27; validation), the last at step 1001." in page
    assert "<td>stopped (SIGTERM)</td>" in page and "<td>-15</td>" not in page
