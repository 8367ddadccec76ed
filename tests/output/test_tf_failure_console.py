"""Real TensorFlow jobs that fail inside TensorFlow because of the user's mistake: the
console hides absl's multi-line records (TF 2.15 Estimator, absl at INFO), and the failure
tail names the user's line, not TensorFlow's, with no banner in its box (TF 2.21)."""

from __future__ import annotations

import json
from pathlib import Path

from support import PY_TF215, PY_TF221, run_launch

JOBS = Path(__file__).resolve().parent / "jobs"


def mistake_line(job: Path) -> int:
    return next(i for i, line in enumerate(job.read_text().splitlines(), 1)
                if "# USER-MISTAKE" in line)


def failed_run(tmp_path: Path, command: list[str]):
    spec = {"name": "fails", "cluster": {"chief": 1}, "command": command,
            "model_dir": str(tmp_path / "model"), "max_steps": 3,
            "run_dir": str(tmp_path / "runs"), "restart": {"chief": "never"},
            "timeouts": {"poll": 0.2, "kill": 2}}
    (tmp_path / "spec.json").write_text(json.dumps(spec))
    done = run_launch(str(tmp_path / "spec.json"), timeout=180)
    assert done.returncode == 1, done.stderr
    return done, next((tmp_path / "runs").glob("*/logs/chief-0.log")).read_text()


def test_absl_records_hidden_and_the_failure_names_the_users_frame(tmp_path):
    job = JOBS / "absl_estimator_fails.py"
    done, log = failed_run(tmp_path, [PY_TF215, str(job)])
    shown = done.stdout.splitlines()
    assert "[chief:0] my own print after training" in shown
    assert "estimator.py:200] Using config: {" in log and "graph_options {" in log
    # absl's "Using config: {...}" record and its continuation lines stay in the log
    assert not [line for line in shown if "graph_options" in line or "rewrite_options" in line
                or "_keep_checkpoint_max" in line]
    assert f"raised in {job}, line {mistake_line(job)}, in build_features (innermost: " \
           "constant_op.py, line " in done.stderr
    assert "[chief:0] ValueError: Can't convert non-rectangular Python sequence to Tensor." \
        in shown


def test_the_failure_tail_names_the_users_line_and_holds_no_banner(tmp_path):
    job = JOBS / "tf_missing_data.py"
    done, log = failed_run(tmp_path, [PY_TF221, str(job), str(tmp_path / "no-such.csv")])
    err = done.stderr
    assert f"raised in {job}, line {mistake_line(job)}, in read_rows (innermost: " \
           "file_io.py, line " in err
    box = [line for line in err[err.index("last lines of chief:0"):].splitlines()
           if line.startswith("tfcluster:   | ")]
    assert box[0] == "tfcluster:   | Traceback (most recent call last):"
    assert box[-1].endswith("NotFoundError: " + str(tmp_path / "no-such.csv") +
                            "; No such file or directory")
    for banner in ("absl::InitializeLog()", "oneDNN custom operations"):
        assert banner in log and not [line for line in box if banner in line]
