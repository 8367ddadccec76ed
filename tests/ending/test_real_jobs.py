"""Real TensorFlow 2.15 jobs of scripts as users write them (tests/thirdparty/), ended by
the launcher at max_steps with the final checkpoint evaluated.

Each job runs the roles its rule looks at, and no more (a TensorFlow process costs ~6
CPU-s): a chief; a ps where the script's training is parameter-server training that the
launcher ends; the evaluator where the test names one. No worker: a worker trains as the
chief does, and the rules on stopping several trainers are held by the scripted
tests/launcher/test_end_loop.py (real workers: tests/examples). 1-3 TensorFlow processes
for 8-20 s. Kubeflow's script as written (input for ever): test_input_for_ever_real.py."""

from __future__ import annotations

import shlex

import pytest
from support import PY_TF215, REPO
from thirdparty_jobs import CHIEF_ALONE, THIRDPARTY, launch, shell

pytestmark = pytest.mark.tf

STOCK = shell("stock_estimator.py", '--model_dir="$TFCLUSTER_MODEL_DIR"',
              '--max_steps="$TFCLUSTER_MAX_STEPS"')


def test_a_stock_train_and_evaluate_ends_well(tmp_path):
    """keep_checkpoint_max 5, a checkpoint every 20 steps, TensorFlow's own evaluator
    evaluating during training: it may read a checkpoint the chief deletes, and is then
    restarted; the job exits 0 with the evaluator's last evaluation at max_steps. One
    real run: the race's rule (only the evaluator restarted, the job ends well) is held
    every time by test_end_loop's scripted
    test_an_evaluator_whose_checkpoint_vanished_is_restarted_and_evaluates. A chief and
    the evaluator: the race is between these two (a worker or a ps adds nothing to it)."""
    proc, summary, _ = launch(tmp_path, {"evaluator": "localhost", "command": STOCK,
                                         "cluster": CHIEF_ALONE, "max_steps": 300})
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert summary["training"] == "finished" and summary["evaluation"] == "evaluated"
    assert summary["evaluated_step"] >= 300
    assert summary["final_step"] >= 300 and summary["notes"] == []
    for incident in summary["restarts"]:     # only ever the evaluator, for a vanished file
        assert incident["tasks"] == ["evaluator:0"]
        assert "deleted under it" in incident["reason"]


MIGRATION = shell("migration_guide_estimator.py")      # the rule is the chief's model_dir


def test_a_script_without_model_dir_writes_into_the_spec_s_model_dir(tmp_path):
    """The migration guide's Estimator gets no model_dir: TF_CONFIG carries the spec's."""
    proc, summary, _ = launch(tmp_path, {"command": MIGRATION, "cluster": CHIEF_ALONE,
                                         "env": {"TMPDIR": str(tmp_path)}})
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert sorted((tmp_path / "model").glob("model.ckpt-*.index"))
    assert summary["final_checkpoint"].startswith("model.ckpt-")


def test_without_model_dir_in_tf_config_the_closing_line_says_nothing_was_written(tmp_path):
    proc, summary, _ = launch(tmp_path, {"command": MIGRATION, "max_steps": 3,
                                         "cluster": CHIEF_ALONE, "tf_config_model_dir": False,
                                         "env": {"TMPDIR": str(tmp_path)}})
    assert not list((tmp_path / "model").glob("model.ckpt-*"))
    assert f"note: no checkpoint was written into model_dir {tmp_path / 'model'} although " \
           f"max_steps 3 was given" in proc.stderr
    assert summary["final_checkpoint"] is None


def test_a_model_dir_other_than_the_spec_s_shows_tensorflow_s_error(tmp_path):
    proc, _, _ = launch(tmp_path, {"cluster": CHIEF_ALONE, "max_steps": 20, "command": shell(
        "stock_estimator.py", f"--model_dir={tmp_path / 'model'}/", "--max_steps=20")})
    assert proc.returncode == 1
    assert "chief:0: ValueError: `model_dir` are set both in constructor and `RunConfig`, " \
           "but with different values" in proc.stderr
    assert "pass os.environ['TFCLUSTER_MODEL_DIR'] (the very same string)" in proc.stderr


def test_the_opt_in_runner_stops_an_unmodified_script_at_max_steps(tmp_path):
    """Kubeflow's script (test_input_for_ever_real.py) under `python -m
    orchestrator.at_max_steps`: its TrainSpec gets max_steps from TFCLUSTER_MAX_STEPS, so
    the chief stops there by itself. A chief and its ps: the rule is the chief's own stop."""
    command = ["sh", "-c", f"exec {shlex.quote(PY_TF215)} -m orchestrator.at_max_steps "
                           f"{THIRDPARTY / 'kubeflow_keras_estimator.py'} "
                           f'"$TFCLUSTER_MODEL_DIR"']
    proc, summary, _ = launch(tmp_path, {"max_steps": 200, "command": command,
                                         "env": {"PYTHONPATH": str(REPO)}})
    assert proc.returncode == 0, proc.stderr[-3000:]
    chief = next(t for t in summary["tasks"] if t["task"] == "chief:0")
    assert chief["exit"] == 0 and not chief["stopped"]      # it stopped by itself
    assert 0 <= summary["steps_past_max_steps"] <= 9        # asynchronous overshoot only


def test_tony_s_example_chief_evaluates_after_training_and_is_not_cut_short(tmp_path):
    """TonY's example: --model_dir and --max_steps flags given the spec's ($(VAR)), a chief
    that runs classifier.evaluate after train_and_evaluate (past max_steps, not training):
    it ends by itself with 0; the final checkpoint is evaluated. A chief, its ps and the
    evaluator (the rule is the chief's and the evaluator's); a checkpoint every 100 steps."""
    command = [PY_TF215, str(THIRDPARTY / "tony_mnist_estimator.py"),
               "--model_dir=$(TFCLUSTER_MODEL_DIR)", "--max_steps=$(TFCLUSTER_MAX_STEPS)"]
    proc, summary, _ = launch(tmp_path, {
        "evaluator": "localhost", "max_steps": 200, "command": command,
        "env": {"EVAL_DELAY": "1", "EVAL_THROTTLE": "2", "SAVE_STEPS": "100"}})
    assert proc.returncode == 0, proc.stderr[-3000:]
    chief = next(t for t in summary["tasks"] if t["task"] == "chief:0")
    assert chief["exit"] == 0 and not chief["stopped"]
    assert summary["evaluation"] == "evaluated" and summary["evaluated_step"] >= 200

