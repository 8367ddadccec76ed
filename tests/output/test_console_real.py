"""The console of real TensorFlow 2.15 jobs, off a terminal, as a user reads it:

- an evaluator whose checkpoint was deleted under it (made certain: tests/output/jobs/
  vanishing_evaluator.py deletes it, as keep_checkpoint_max does by chance) is restarted,
  and its 70-line traceback is 3 console lines; the job exits 0;
- an Estimator with MultiWorkerMirroredStrategy (TensorFlow docs' multi-worker Estimator
  tutorial, which writes only its first and last checkpoint, into the model_dir it
  hard-codes) and a TF1 job saving every 600 s (TensorFlow 1's distributed how-to): the
  progress line's step moves while they train, from the trainers' own output; the
  tutorial's own model_dir is named in one line.

The scripts run unchanged; the runner sets TensorFlow's log level to INFO first, as
Kubeflow's and TonY's scripts do themselves (tests/thirdparty), so that their step lines
are written. Each job runs only the roles its rule needs."""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

import pytest
from support import PY_TF215, REPO, run_launch

pytestmark = pytest.mark.tf

THIRDPARTY = REPO / "tests" / "thirdparty"
VANISHING = Path(__file__).resolve().parent / "jobs" / "vanishing_evaluator.py"
TUTORIAL_DIR = Path("/tmp/multiworker")     # hard-coded by the tutorial
PROGRESS = re.compile(r"^tfcluster: progress: step ~?(\d+)")


def with_info(script: Path, *args: str) -> list[str]:
    """The script run unchanged after TensorFlow's log level is set to INFO."""
    return [PY_TF215, "-c", "import runpy, sys; import tensorflow as tf; "
            "tf.get_logger().setLevel('INFO'); sys.argv = sys.argv[1:]; "
            "runpy.run_path(sys.argv[0], run_name='__main__')", str(script), *args]


def launch(tmp_path: Path, doc: dict, timeout: float = 300):
    doc = {"name": tmp_path.name[:20], "model_dir": str(tmp_path / "model"), **doc}
    spec = tmp_path / "spec.json"
    spec.write_text(json.dumps(doc))
    return run_launch(str(spec), "--run-dir", str(tmp_path / "run"), timeout=timeout)


def steps_while_training(stderr: str) -> list[int]:
    """The steps of the progress lines printed before training was done."""
    steps = []
    for line in stderr.splitlines():
        if "reached max_steps" in line or "finishing" in line or "training ended" in line \
                or " finished" in line:
            break
        m = PROGRESS.match(line)
        if m:
            steps.append(int(m.group(1)))
    return steps


def test_the_evaluator_race_is_three_lines_and_the_job_succeeds(tmp_path):
    stock = ["sh", "-c", f"exec {PY_TF215} {THIRDPARTY / 'stock_estimator.py'} "
                         '--model_dir="$TFCLUSTER_MODEL_DIR" --max_steps="$TFCLUSTER_MAX_STEPS"']
    evaluator = ["sh", "-c", f"exec {PY_TF215} {VANISHING} "
                             '--model_dir="$TFCLUSTER_MODEL_DIR" '
                             '--max_steps="$TFCLUSTER_MAX_STEPS"']
    done = launch(tmp_path, {"cluster": {"chief": 1}, "evaluator": "localhost",
                             "max_steps": 300, "command": stock,
                             "roles": {"evaluator": {"command": evaluator}},
                             "env": {"EVAL_DELAY": "1", "EVAL_THROTTLE": "1"}})
    assert done.returncode == 0, done.stderr[-3000:]
    lines = (done.stdout + done.stderr).splitlines()
    assert not any(line.startswith("[evaluator:0]") and ("Traceback" in line or
                                                         line.startswith("[evaluator:0]   "))
                   for line in lines), done.stdout
    first = next(i for i, line in enumerate(done.stderr.splitlines())
                 if "the checkpoint it read was deleted under it" in line)
    fold = done.stderr.splitlines()[first:first + 3]
    assert fold[0].startswith("tfcluster: evaluator:0 failed with exit status 1 (the "
                              "checkpoint it read was deleted under it: keep_checkpoint_max)"
                              "; restarting evaluator:0")
    assert fold[1].startswith("tfcluster: evaluator:0: ValueError: The passed save_path is "
                              "not a valid checkpoint: ")
    log = tmp_path / "run" / "logs" / "evaluator-0.log"
    m = re.match(rf"tfcluster:   \(not shown: traceback from line (\d+) of {log}, raised in "
                 rf"{VANISHING}, line \d+, in <module>", fold[2])
    assert m, fold[2]
    traceback_at = log.read_text().splitlines()[int(m.group(1)) - 1]
    assert traceback_at == "Traceback (most recent call last):"
    assert len(lines) <= 60, "\n".join(lines)
    summary = json.loads((tmp_path / "run" / "summary.json").read_text())
    assert summary["evaluation"] == "evaluated" and summary["evaluated_step"] >= 300


@pytest.fixture(scope="module")
def tutorial(tmp_path_factory):
    """The multi-worker Estimator tutorial on a chief and a worker (MultiWorkerMirrored),
    150 steps (19,200 images, 64 a batch, half each): its own model_dir, /tmp/multiworker,
    is the tutorial's; it is emptied before and after."""
    tmp_path = tmp_path_factory.mktemp("tutorial")
    shutil.rmtree(TUTORIAL_DIR, ignore_errors=True)
    try:
        done = launch(tmp_path, {
            "cluster": {"chief": 1, "worker": 1}, "strategy": "multi_worker_mirrored",
            "tf_config_model_dir": False, "env": {"ROWS": "19200"},
            "command": with_info(THIRDPARTY / "multiworker_estimator_tutorial.py")})
    finally:
        shutil.rmtree(TUTORIAL_DIR, ignore_errors=True)
    assert done.returncode == 0, done.stderr[-3000:]
    return done, tmp_path


def test_an_estimator_with_mwms_shows_its_step_moving(tutorial):
    done, _ = tutorial
    # how many lines come while it trains depends on the machine's speed: each one shows
    # the output's step (model_dir has none), never lower than the one before. Whether a
    # "no new step for Ns" comes after its last step line (every 100 steps, 150 in all)
    # depends on the load too: that the line never says so while a trainer's output shows
    # steps moving is the unit tests' (tests/launcher/output/test_trainer_steps.py)
    steps = steps_while_training(done.stderr)
    assert steps and steps == sorted(steps), done.stderr
    assert "from chief:0's output" in done.stderr or "from worker:0's output" in done.stderr


def test_a_model_dir_the_script_hard_codes_is_named_in_one_line(tutorial):
    done, tmp_path = tutorial
    named = [line for line in done.stderr.splitlines() if "/tmp/multiworker" in line]
    assert len(named) == 1, done.stderr
    assert named[0].startswith("tfcluster: chief:0 writes into /tmp/multiworker, not into "
                               f"the spec's model_dir {tmp_path / 'model'} (") or \
        named[0].startswith("tfcluster: worker:0 writes into /tmp/multiworker"), named[0]


def test_a_tf1_job_saving_every_600s_shows_its_step_moving(tmp_path):
    """MonitoredTrainingSession's defaults: a checkpoint at step 0 and at the end only;
    the chief logs global_step/sec every 100 steps. A chief and its ps."""
    done = launch(tmp_path, {
        "cluster": {"chief": 1, "ps": 1}, "max_steps": 5000,
        "command": with_info(THIRDPARTY / "tf1_distributed_howto.py",
                             "--checkpoint_dir=$(TFCLUSTER_MODEL_DIR)",
                             "--last_step=$(TFCLUSTER_MAX_STEPS)")})
    assert done.returncode == 0, done.stderr[-3000:]
    steps = steps_while_training(done.stderr)
    moving = [s for s in steps if 0 < s < 5000]
    assert moving and steps == sorted(steps), done.stderr
    assert "no new step" not in done.stderr
    assert "estimated from chief:0's global_step/sec" in done.stderr
    checkpoints = sorted((tmp_path / "model").glob("model.ckpt-*.index"))
    assert len(checkpoints) == 2, checkpoints           # the first and the last only
