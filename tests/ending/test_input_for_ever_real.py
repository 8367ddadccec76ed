"""Kubeflow's Estimator example as written (tests/thirdparty/kubeflow_keras_estimator.py,
TensorFlow 2.15): a TrainSpec without max_steps, its input repeated, TensorFlow's evaluator
(it would loop for ever). Only the launcher's coordinator can end it, at the spec's
max_steps.

One real run (a chief, its ps, the evaluator: ~3 TensorFlow processes, ~15 s) that the
tests of this module read, each a different fact of the same job: how the launcher ended
it, what the coordinator read of TensorFlow's real checkpoint and events files, and what a
second launch of the same spec does."""

from __future__ import annotations

import json
from pathlib import Path
from typing import NamedTuple

import pytest
from support import run_launch
from thirdparty_jobs import launch, shell

from orchestrator.checkpoints import newest_complete, stored_global_step
from orchestrator.tfformats import newest_event_step

pytestmark = pytest.mark.tf
MAX_STEPS = 200


class Job(NamedTuple):
    dir: Path               # the spec (cluster.json), model/ and run/
    proc: object            # the finished `launch`
    summary: dict
    events: list[dict]


@pytest.fixture(scope="module")
def job(tmp_path_factory) -> Job:
    path = tmp_path_factory.mktemp("input_for_ever")
    proc, summary, events = launch(path, {
        "evaluator": "localhost", "max_steps": MAX_STEPS,
        "command": shell("kubeflow_keras_estimator.py", '"$TFCLUSTER_MODEL_DIR"'),
        "env": {"EVAL_DELAY": "1", "EVAL_THROTTLE": "1"}})
    return Job(path, proc, summary, events)


def test_input_for_ever_and_no_max_steps_in_the_script_ends_at_max_steps(job):
    """The trainers are stopped as soon as a checkpoint reached max_steps, the evaluator
    once it evaluated the final checkpoint; the final step is reported."""
    proc, summary = job.proc, job.summary
    assert proc.returncode == 0, proc.stderr[-3000:]
    stops = {tuple(e["tasks"]): e["reason"] for e in job.events if e["event"] == "stopping"}
    # the chief either saved on request once its step passed max_steps unsaved (then
    # exited by itself), or its own 50-step checkpoint came first and it was stopped
    request = summary.get("save_request")
    assert (request is not None and request["saved"]) or \
        "still moving: the script ignores max_steps" in stops[("chief:0",)], stops
    assert stops[("evaluator:0",)].startswith("the final checkpoint (step ")
    final = summary["final_step"]
    assert final >= MAX_STEPS and summary["evaluated_step"] == final
    assert f"final checkpoint model.ckpt-{final}, {final - MAX_STEPS} steps past max_steps " \
           f"{MAX_STEPS}" in proc.stderr


def test_the_coordinator_reads_tensorflow_s_checkpoint_and_events_files(job):
    """What the coordinator reads agrees with the files TensorFlow wrote: the newest
    complete checkpoint with all its data shards (the variables lie on the ps and the
    chief), the step stored in it (an object-based checkpoint of a Keras model turned
    into an Estimator: read from its data shard without TensorFlow, then with it), the
    step of the events file as TensorFlow reads it; it finished the job once."""
    assert job.proc.returncode == 0, job.proc.stderr[-3000:]
    model = job.dir / "model"
    ckpt = newest_complete(str(model))
    assert ckpt is not None and ckpt.step >= MAX_STEPS
    assert ckpt.shards == len(list(model.glob(f"{ckpt.name}.data-*"))) > 1
    assert ckpt.step_from != "name" and stored_global_step(ckpt.path) == ckpt.step
    import tensorflow as tf

    events_file = sorted(model.glob("events.out.tfevents.*"))[-1]
    tf_steps = []
    try:    # the chief was stopped while writing: the file may end in a cut record
        for event in tf.compat.v1.train.summary_iterator(str(events_file)):
            tf_steps.append(event.step)
    except tf.errors.DataLossError:
        pass
    assert (newest_event_step(events_file.read_bytes())[0] or 0) == max(tf_steps)
    assert f"reached max_steps {MAX_STEPS}" in job.proc.stderr
    assert "progress: step " in job.proc.stderr
    (finish,) = [e for e in job.events if e["event"] == "coordinator"]
    assert finish["action"] == "finish" and finish["checkpoint"].startswith("model.ckpt-")
    exits = {e["task"]: e for e in job.events if e["event"] == "task_exited"}
    assert exits["chief:0"]["stopped"] or job.summary["save_request"]["saved"], \
        "the chief should have kept training until stopped, or saved on request"
    assert exits["ps:0"]["stopped"]
    assert any(e["event"] == "checkpoint" and e["step"] >= MAX_STEPS for e in job.events)


def test_a_second_launch_of_a_trained_model_reports_it_and_starts_nothing(job):
    assert job.proc.returncode == 0, job.proc.stderr[-3000:]
    ckpt = newest_complete(str(job.dir / "model"))
    again = run_launch(str(job.dir / "cluster.json"), "--quiet", "--run-dir",
                       str(job.dir / "again"), timeout=120)
    assert again.returncode == 0, again.stderr
    assert "nothing to train" in again.stderr and ckpt.name in again.stderr
    events = (job.dir / "again" / "events.jsonl").read_text().splitlines()
    assert [json.loads(line)["event"] for line in events] == ["already_trained"]
