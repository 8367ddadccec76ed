"""A stock train_and_evaluate (TensorFlow 2.15) whose evaluator sleeps in TensorFlow's
``start_delay_secs`` after the trainers ended: the progress line says what is waited for,
why, and for how long at most, instead of repeating the last rate.

Budget: 2 TensorFlow processes, about 45 s on 2 cores (20 s of it the evaluator's delay)."""

from __future__ import annotations

import json
import shlex

import pytest
from support import PY_TF215, REPO, run_launch

pytestmark = pytest.mark.tf
SCRIPT = REPO / "tests" / "thirdparty" / "stock_estimator.py"


def test_the_evaluator_wait_is_shown_with_its_reason_and_bound(tmp_path):
    spec = tmp_path / "cluster.json"
    spec.write_text(json.dumps({
        "cluster": {"chief": 1}, "evaluator": "localhost", "strategy": "estimator",
        "command": ["sh", "-c", f"exec {shlex.quote(PY_TF215)} {SCRIPT} "
                                '--model_dir="$TFCLUSTER_MODEL_DIR" '
                                '--max_steps="$TFCLUSTER_MAX_STEPS"'],
        "env": {"EVAL_DELAY": "20"}, "model_dir": str(tmp_path / "model"),
        "max_steps": 100, "timeouts": {"evaluator": 120}}))
    proc = run_launch(str(spec), "--run-dir", str(tmp_path / "run"), timeout=240)
    assert proc.returncode == 0, proc.stderr[-3000:]
    progress = [line for line in proc.stderr.splitlines() if "progress: " in line]
    waiting = [line for line in progress if "training ended; waiting for evaluator:0 to "
               "evaluate the final checkpoint (step 100): TensorFlow's evaluator waits "
               "EvalSpec.start_delay_secs" in line]
    assert waiting, "\n".join(progress)
    assert "(timeouts.evaluator 120s)" in waiting[0] and "at most " in waiting[0]
    assert not any("steps/s" in line or "no new step" in line
                   for line in progress[progress.index(waiting[0]):])
