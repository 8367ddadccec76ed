"""What the evaluator evaluated, as the coordinator follows it: TensorFlow's eval events
(``eval*/events.out.tfevents.*``) and the metrics file's eval lines."""

from __future__ import annotations

import json

from coordinator.tf_writes import FakeTrainer, tfrecord
from test_coordinator import Clock

from orchestrator.checkpoints import CheckpointReader
from orchestrator.coordinator import Coordinator
from orchestrator.evaluated import EvaluationFollower, newest_evaluated

SUMMARY = b"\x0a\x0a\x0a\x08accuracy"   # Summary{value{tag: "accuracy"}}


def test_each_evaluation_of_tf_s_evaluator_is_followed(tmp_path):
    model = tmp_path / "model"
    (model / "eval").mkdir(parents=True)
    events = model / "eval" / "events.out.tfevents.1700000000.host"
    clock = Clock()
    follower = EvaluationFollower(CheckpointReader(str(model)), clock=clock)
    assert follower.poll() is None                  # no evaluation yet
    written = tfrecord(0) + tfrecord(140, SUMMARY)
    events.write_bytes(written)
    assert follower.poll() == 140
    events.write_bytes(written + tfrecord(300, SUMMARY)[:9])   # a record being written
    assert follower.poll() == 140
    events.write_bytes(written + tfrecord(300, SUMMARY))
    assert follower.poll() == 300
    named = model / "eval_holdout"                 # EvalSpec(name="holdout"), listed later
    named.mkdir()
    (named / "events.out.tfevents.1700000001.host").write_bytes(tfrecord(420, SUMMARY))
    clock.now += 10
    assert follower.poll() == 420
    clash = model / "eval_clash"                  # two writers of one file name
    clash.mkdir()
    (clash / "events.out.tfevents.1700000002.host").write_bytes(
        tfrecord(0) + tfrecord(430, SUMMARY) + b"\xff" * 40)
    clock.now += 10
    assert follower.poll() == 430
    assert newest_evaluated(CheckpointReader(str(model))) == 430
    events.unlink()                                 # a vanished file is not an error
    assert follower.poll() == 430
    assert newest_evaluated(CheckpointReader(str(model)), metrics_step=500) == 500


def test_the_coordinator_reports_the_newest_evaluated_step(tmp_path):
    import fsspec

    url = str(tmp_path / "model")
    FakeTrainer(fsspec.filesystem("file"), url).save(200)
    seen = []
    coord = Coordinator(url, max_steps=200, clock=Clock(),
                        on_change=lambda event, fields: seen.append((event, fields)))
    assert coord.poll_once().evaluated_step is None
    with open(f"{url}/tfcluster_metrics.jsonl", "w") as f:
        f.write(json.dumps({"split": "eval", "step": 200, "metrics": {"auc": 0.7}}) + "\n")
    assert coord.poll_once().evaluated_step == 200
    assert ("evaluated", {"step": 200}) in seen


def test_max_steps_in_the_events_file_finishes_before_a_checkpoint_does(tmp_path):
    import fsspec

    from orchestrator.decisions import FINISH

    url = str(tmp_path / "model")
    FakeTrainer(fsspec.filesystem("file"), url).save(0)
    with open(f"{url}/events.out.tfevents.1700000000.host", "wb") as f:
        f.write(tfrecord(0) + tfrecord(650, b"\x0a\x04loss"))
    coord = Coordinator(url, max_steps=600, clock=Clock())
    coord.poll_once()
    decision = coord.judge([])
    assert decision.action == FINISH
    assert decision.reason == ("step 650 in the chief's events file reached max_steps 600 "
                               "(newest complete checkpoint model.ckpt-0)")


def test_polls_come_faster_when_max_steps_is_near():
    from orchestrator.checkpoints import Checkpoint
    from orchestrator.coordinator import Progress

    coord = Coordinator("memory://near", max_steps=1000, poll=1.0, clock=Clock())
    assert coord.next_wait(Progress(max_steps=1000, eta_secs=30.0)) == 1.0
    assert coord.next_wait(Progress(max_steps=1000, eta_secs=1.5)) == 0.1
    assert coord.next_wait(Progress(max_steps=None, eta_secs=1.5)) == 1.0
    reached = Progress(max_steps=1000, checkpoint=Checkpoint("model.ckpt-1000", "", 1000,
                                                            "estimator", 1, 1000))
    assert coord.next_wait(reached) == 0.1           # until two polls after it
    coord.clock.now += 2.0
    assert coord.next_wait(reached) == 1.0
