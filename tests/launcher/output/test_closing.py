"""Closing lines from one last read of model_dir, each in the situation that calls for it
(model_dir written by a fake of TensorFlow's file layout; tests/ending/test_real_jobs.py
shows them with real TensorFlow)."""

from __future__ import annotations

import json

import fsspec
from coordinator.tf_writes import FakeTrainer, tfrecord

from launcher.output.closing import final_read
from orchestrator.checkpoints import CheckpointReader
from orchestrator.sharding import SHARD_MARK


def model_dir(tmp_path, *saves: int) -> CheckpointReader:
    url = str(tmp_path / "model")
    trainer = FakeTrainer(fsspec.filesystem("file"), url)
    fsspec.filesystem("file").makedirs(url, exist_ok=True)
    for step in saves:
        trainer.save(step)
    return CheckpointReader(url)


def evaluated(reader: CheckpointReader, step: int) -> None:
    (d := fsspec.filesystem("file")).makedirs(reader._path("eval"), exist_ok=True)
    d.pipe_file(reader._path("eval/events.out.tfevents.1.host"), tfrecord(step, b"\x0a\x02x"))


def test_a_job_that_ended_well_has_no_note_and_says_where_it_ended(tmp_path):
    reader = model_dir(tmp_path, 500, 1002)
    evaluated(reader, 1002)
    c = final_read(reader, 1000, has_evaluator=True)
    assert c.notes == []
    assert c.outcome_line() == ("final checkpoint model.ckpt-1002, 2 steps past max_steps 1000"
                                "; evaluated at step 1002")
    assert c.to_dict()["evaluation"] == "evaluated"
    assert c.to_dict()["steps_past_max_steps"] == 2


def test_no_checkpoint_although_max_steps_was_given(tmp_path):
    c = final_read(model_dir(tmp_path), 1000, has_evaluator=False)
    assert len(c.notes) == 1
    assert c.notes[0].startswith("no checkpoint was written into model_dir ")
    assert "although max_steps 1000 was given" in c.notes[0]


def test_keras_3_files_are_named_instead_of_no_checkpoint(tmp_path):
    reader = model_dir(tmp_path)
    fsspec.filesystem("file").pipe_file(reader._path("ckpt_1.weights.h5"), b"\x89HDF")
    c = final_read(reader, 1000, has_evaluator=False)
    assert len(c.notes) == 1 and c.notes[0].startswith(
        "no TensorFlow checkpoint in model_dir ") and "(ckpt_1.weights.h5)" in c.notes[0]


def test_a_failed_training_gets_no_checkpoint_notes(tmp_path):
    assert final_read(model_dir(tmp_path), 1000, False, training_finished=False).notes == []


def test_short_of_max_steps_is_read_at_the_end_not_from_the_last_poll(tmp_path):
    c = final_read(model_dir(tmp_path, 800), 938, has_evaluator=False)
    assert c.notes == ["the newest complete checkpoint is at step 800, short of max_steps 938"]
    assert final_read(model_dir(tmp_path, 800, 938), 938, has_evaluator=False).notes == []


def test_a_script_that_ignores_max_steps_is_told_what_to_do(tmp_path):
    c = final_read(model_dir(tmp_path, 44081), 939, has_evaluator=False)
    assert len(c.notes) == 1
    assert "model.ckpt-44081 is 46.9x max_steps 939: the script ignores max_steps" in c.notes[0]
    assert "python -m orchestrator.at_max_steps" in c.notes[0]


def test_epochs_without_any_trainer_reading_its_shard(tmp_path):
    logs = [tmp_path / "chief-0.log", tmp_path / "worker-0.log"]
    for log in logs:
        log.write_text("INFO:tensorflow:loss = 0.6, step = 1\n")
    reader = model_dir(tmp_path, 300)
    c = final_read(reader, 300, False, epochs=1, trainer_logs=map(str, logs))
    assert len(c.notes) == 1 and c.notes[0].startswith("epochs 1 had no effect on the input")
    # an asynchronous job whose trainers each read a full copy: one epoch's worth in all,
    # not "every example more than once"
    assert "each read its own full copy of the data; by max_steps 300 the cluster read one " \
           "epoch's worth of examples in all, from those copies: some examples several " \
           "times, others never" in c.notes[0]
    assert "more than" not in c.notes[0]
    logs[1].write_text(f"{SHARD_MARK} 1 of 2 (shard_dataset)\n")
    assert final_read(reader, 300, False, epochs=1, trainer_logs=map(str, logs)).notes == []


def test_a_run_interrupted_before_its_first_step_gets_no_epochs_note(tmp_path):
    log = tmp_path / "chief-0.log"
    log.write_text("2026-12-02 07:42:15: I tensorflow/core/util/port.cc:113] oneDNN\n")
    c = final_read(model_dir(tmp_path), 300, False, epochs=3, trainer_logs=[str(log)],
                   training_finished=False)
    assert c.notes == []


def test_the_final_checkpoint_not_evaluated(tmp_path):
    reader = model_dir(tmp_path, 100, 200)
    c = final_read(reader, 200, has_evaluator=True)
    assert c.notes[-1].startswith("the final checkpoint model.ckpt-200 was not evaluated "
                                  "(it evaluated nothing)")
    evaluated(reader, 100)
    c = final_read(reader, 200, has_evaluator=True)
    assert "(its last evaluation was at step 100)" in c.notes[-1]
    with open(reader._path("tfcluster_metrics.jsonl"), "w") as f:      # the helper's line
        f.write(json.dumps({"split": "eval", "step": 200, "metrics": {}}) + "\n")
    c = final_read(reader, 200, has_evaluator=True)
    assert c.notes == [] and c.evaluated_step == 200


def test_an_evaluation_seen_while_the_job_ran_counts(tmp_path):
    """TF1 names events files by second and host: the chief's own evaluate can overwrite
    the evaluator's file; what the coordinator saw then still counts."""
    reader = model_dir(tmp_path, 200)
    c = final_read(reader, 200, has_evaluator=True, seen_evaluated=200)
    assert c.notes == [] and c.evaluation == "evaluated"

