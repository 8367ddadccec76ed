"""The exit status rule: a job the launcher ended (max_steps seen in the chief's events
file) is never ``succeeded`` while the newest checkpoint is short of max_steps, unless the
user's script exited 0 by itself (the real job loop over the scripted backend, a model_dir
written in TensorFlow's file layout; tests/ending/test_restore_real.py runs real TF1)."""

from __future__ import annotations

import fsspec
import pytest
from coordinator.tf_writes import FakeTrainer
from scripted_backend import Script, ScriptedBackend, run_job

from launcher.ending import TrainingView
from launcher.output.closing import final_read
from launcher.output.summary import STATUS_RULE, ended_words, summary_doc, verdict
from orchestrator.checkpoints import CheckpointReader
from orchestrator.decisions import FINISH, Decision

pytestmark = pytest.mark.usefixtures("scripted_backend")
MAX_STEPS = 100


class EventsSayDone:
    """A coordinator stand-in: the events file reached max_steps at 2 s."""

    def __init__(self, clock):
        self.clock = clock

    def tick(self, tasks):
        if self.clock() >= 2:
            return Decision(FINISH, f"step {MAX_STEPS} in the chief's events file reached "
                                    f"max_steps {MAX_STEPS}")
        return None

    def close(self):
        pass


def ended(tmp_path, chief: Script, *saves: int):
    url = str(tmp_path / "model")
    fs = fsspec.filesystem("file")
    fs.makedirs(url, exist_ok=True)
    trainer = FakeTrainer(fs, url)
    for step in saves:
        trainer.save(step)
    backend = ScriptedBackend({"chief:0": [chief]})
    result, _ = run_job({"cluster": {"chief": 1, "ps": 1}, "max_steps": MAX_STEPS,
                         "timeouts": {"finish": 5, "kill": 1, "poll": 1}}, backend, tmp_path,
                        monitors=[EventsSayDone(backend.clock)],
                        training=lambda: TrainingView(MAX_STEPS))
    return result, final_read(CheckpointReader(url), MAX_STEPS, False)


def test_stopped_by_the_launcher_short_of_max_steps_is_a_failure(tmp_path):
    result, closing = ended(tmp_path, Script(), 0, 40)      # runs on until stopped
    assert result.status == 0                               # every task ended ...
    why = verdict(result, closing)                          # ... but training fell short
    assert why == ("training was ended by the launcher, but the newest complete checkpoint "
                   "model.ckpt-40 is short of max_steps 100, and chief:0 did not exit 0 by "
                   "itself")
    doc = summary_doc(result.__class__(1, why, result.tasks, result.duration,
                                       result.training_finished), closing, [])
    assert (doc["status"], doc["training"]) == (1, "stopped short")
    assert doc["status_rule"] == STATUS_RULE and "short of max_steps" in STATUS_RULE


def test_no_checkpoint_at_all_is_a_failure_too(tmp_path):
    result, closing = ended(tmp_path, Script())
    assert verdict(result, closing).startswith(
        "training was ended by the launcher, but no checkpoint was written into model_dir")


def test_a_script_that_exited_0_by_itself_succeeded_with_a_note(tmp_path):
    result, closing = ended(tmp_path, Script(exit_at=3), 0, 40)
    assert verdict(result, closing) is None
    assert closing.notes == ["the newest complete checkpoint is at step 40, short of "
                             "max_steps 100"]


def test_a_checkpoint_at_max_steps_succeeded_whoever_stopped_the_chief(tmp_path):
    result, closing = ended(tmp_path, Script(), 0, 40, 100)
    assert result.status == 0 and verdict(result, closing) is None


def test_a_cancelled_run_is_said_cancelled_not_failed():
    assert ended_words(143) == "cancelled (exit status 143)"      # launch cancel: SIGTERM
    assert ended_words(130) == "cancelled (exit status 130)"      # Ctrl-C
    assert ended_words(1) == "FAILED (exit status 1)"
    assert ended_words(0) == "succeeded"
