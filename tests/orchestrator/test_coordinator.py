"""The Coordinator's judgement (finish at max_steps, dead ps, stall) and its progress figures,
on a local directory and on S3, with a clock the test moves."""

from __future__ import annotations

import json

from coordinator.tf_writes import FakeTrainer, tfrecord

from orchestrator.coordinator import Coordinator
from orchestrator.decisions import TaskState
from orchestrator.tfformats import newest_event_step


class Clock:
    def __init__(self):
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def cluster(ps_alive: bool = True, trainers_alive: bool = True) -> list[TaskState]:
    return [
        TaskState("ps:0", "ps", "localhost:2222", alive=ps_alive,
                   exit_status=None if ps_alive else "killed (SIGKILL)"),
        TaskState("chief:0", "chief", "localhost:2223", alive=trainers_alive),
        TaskState("worker:0", "worker", "localhost:2224", alive=trainers_alive),
    ]


def coordinator(storage, clock, **kwargs) -> Coordinator:
    url, _, options = storage
    return Coordinator(url, storage_options=options, clock=clock, **kwargs)


def test_progress_rate_eta_and_finish_at_max_steps(storage):
    url, fs, _ = storage
    clock = Clock()
    trainer = FakeTrainer(fs, url, shards=2)
    seen = []
    coord = coordinator(storage, clock, max_steps=1000, stall=60,
                        on_change=lambda event, fields: seen.append((event, fields)))
    trainer.save(0)
    p = coord.poll_once()
    assert (p.step, p.steps_per_sec, p.eta_secs) == (0, None, None)
    clock.now += 10
    trainer.save(200)
    p = coord.poll_once()       # the time up to the first step after a start is TF starting
    assert (p.step, p.steps_per_sec, p.eta_secs) == (200, None, None)
    clock.now += 10
    trainer.save(600)
    p = coord.poll_once()
    assert p.step == 600 and p.steps_per_sec == 40.0 and p.eta_secs == 10.0
    assert coord.judge(cluster()) is None
    clock.now += 10
    trainer.save(1002)                       # asynchronous overshoot
    coord.poll_once()
    verdict = coord.judge(cluster())
    assert verdict.action == "finish" and "model.ckpt-1002" in verdict.reason
    assert coord.newest_complete().name == "model.ckpt-1002"
    assert [f["step"] for e, f in seen if e == "checkpoint"] == [0, 200, 600, 1002]


def test_a_dead_ps_fails_the_job_at_once_naming_it(storage):
    url, fs, _ = storage
    clock = Clock()
    FakeTrainer(fs, url).save(100)
    coord = coordinator(storage, clock, max_steps=1000, stall=300)
    coord.poll_once()
    verdict = coord.judge(cluster(ps_alive=False))
    assert verdict.action == "lost" and verdict.tasks == ("ps:0",)
    assert "ps:0 (localhost:2222) killed (SIGKILL)" in verdict.reason
    assert "chief:0, worker:0" in verdict.reason
    # a ps the launcher stopped itself is not dead; no trainer left: nothing to judge
    stopped = [TaskState("ps:0", "ps", alive=False, stopped=True)] + cluster()[1:]
    assert coord.judge(stopped) is None
    assert coord.judge(cluster(ps_alive=False, trainers_alive=False)) is None


def test_stall_names_the_silent_tasks_and_a_missing_shard(storage):
    url, fs, _ = storage
    clock = Clock()
    trainer = FakeTrainer(fs, url, shards=2)
    trainer.save(100)
    coord = coordinator(storage, clock, max_steps=1000, stall=120)
    coord.poll_once()
    clock.now += 100
    trainer.save(200, skip_shards=(1,))      # named, but ps:1's shard went elsewhere
    coord.poll_once()
    assert coord.progress().step == 100
    clock.now += 119                          # the state file changed at +100: not stalled
    coord.poll_once()
    assert coord.judge(cluster()) is None
    clock.now += 2
    coord.poll_once()
    verdict = coord.judge(cluster() + [TaskState("ps:1", "ps")])
    assert verdict.action == "fail"
    assert verdict.tasks == ("chief:0", "worker:0", "ps:0", "ps:1")
    assert "training stalled" in verdict.reason and "model.ckpt-100" in verdict.reason
    assert "model.ckpt-200.data-00001-of-00002 (written by ps:1" in verdict.reason


def test_a_growing_events_file_is_a_sign_of_life(storage):
    url, fs, _ = storage
    clock = Clock()
    FakeTrainer(fs, url).save(0)
    events = f"{url}/events.out.tfevents.1700000000.host"
    fs.pipe_file(events, b"e" * 10)
    coord = coordinator(storage, clock, max_steps=1000, stall=90)
    coord.poll_once()
    for size in (20, 30, 40):                 # summaries flushed every 60 s, no checkpoint
        clock.now += 60
        fs.pipe_file(events, b"e" * size)
        coord.poll_once()
        assert coord.judge(cluster()) is None
    clock.now += 91
    coord.poll_once()
    assert coord.judge(cluster()).action == "fail"


def test_latest_evaluation_is_read_from_the_metrics_file(storage):
    url, fs, _ = storage
    clock = Clock()
    FakeTrainer(fs, url).save(100)
    coord = coordinator(storage, clock, max_steps=1000)
    assert coord.poll_once().latest_eval is None
    lines = [
        {"step": 100, "checkpoint": "model.ckpt-100", "split": "eval",
         "metrics": {"accuracy": 0.5}, "time": 1.0},
        {"step": 100, "checkpoint": "model.ckpt-100", "split": "train",
         "metrics": {"accuracy": 0.4}, "time": 2.0},
    ]
    fs.pipe_file(f"{url}/tfcluster_metrics.jsonl",
                 "".join(json.dumps(x) + "\n" for x in lines).encode())
    latest = coord.poll_once().latest_eval
    assert latest["split"] == "eval" and latest["metrics"] == {"accuracy": 0.5}


def test_storage_errors_are_kept_not_raised_and_judge_no_stall(tmp_path):
    clock = Clock()
    (tmp_path / "model").mkdir()
    (tmp_path / "model" / "checkpoint").mkdir()   # a directory where the state file goes
    coord = Coordinator(str(tmp_path / "model"), clock=clock, stall=10)
    p = coord.poll_once()
    assert p.poll_errors == 1 and p.last_error
    clock.now += 100
    coord.poll_once()
    assert coord.judge(cluster()) is None            # it cannot see: it does not judge
    assert coord.judge(cluster(ps_alive=False)).action == "lost"
    (tmp_path / "model" / "checkpoint").rmdir()
    assert coord.poll_once().last_error is None
    assert coord.judge(cluster()).action == "fail"


def test_thread_polls_until_stopped(tmp_path):
    import fsspec

    trainer = FakeTrainer(fsspec.filesystem("file"), str(tmp_path / "m"))
    trainer.save(5)
    coord = Coordinator(str(tmp_path / "m"), poll=0.05).start()
    try:
        import time

        deadline = time.monotonic() + 30
        while coord.progress().step != 5 and time.monotonic() < deadline:
            time.sleep(0.05)
        assert coord.progress().step == 5
    finally:
        coord.stop()
    assert not coord._thread.is_alive()


def test_starting_tensorflow_gets_the_startup_time_on_top(storage):
    url, fs, _ = storage
    clock = Clock()
    coord = coordinator(storage, clock, max_steps=1000, stall=30, startup=60)
    coord.poll_once()
    clock.now += 89
    coord.poll_once()
    assert coord.judge(cluster()) is None            # no checkpoint yet: 30 + 60 allowed
    FakeTrainer(fs, url).save(0)
    coord.poll_once()
    clock.now += 29
    coord.poll_once()
    assert coord.judge(cluster()) is None
    clock.now += 2
    coord.poll_once()
    verdict = coord.judge(cluster())
    assert verdict.action == "fail" and "timeouts.stall = 30s" in verdict.reason
    quiet = coordinator((url + "-empty", fs, storage[2]), clock, max_steps=1000, stall=30,
                        startup=60)
    quiet.poll_once()
    clock.now += 91
    quiet.poll_once()
    assert "timeouts.start + timeouts.stall = 90s" in quiet.judge(cluster()).reason


def test_checkpoints_from_before_the_job_and_restarts_get_the_startup_time(storage):
    url, fs, _ = storage
    clock = Clock()
    trainer = FakeTrainer(fs, url)
    trainer.save(500)                                 # a previous run's checkpoint
    coord = coordinator(storage, clock, max_steps=1000, stall=30, startup=60)
    assert coord.poll_once().step == 500
    clock.now += 89
    coord.poll_once()
    assert coord.judge(cluster()) is None             # resuming: startup time too
    trainer.save(600)
    coord.poll_once()
    clock.now += 29
    coord.note_restart()                              # e.g. the cluster restarted
    clock.now += 89
    coord.poll_once()
    assert coord.judge(cluster()) is None
    clock.now += 2
    coord.poll_once()
    assert "last sign: a restart" in coord.judge(cluster()).reason


def test_event_steps_are_read_from_whole_records_only():
    data = tfrecord(0) + tfrecord(300, b"\x0a\x04loss") + tfrecord(200)
    assert newest_event_step(data) == (300, len(data))
    cut = data + tfrecord(400)[:-3]
    assert newest_event_step(cut) == (300, len(data))


def test_steps_between_checkpoints_come_from_the_events_file(storage):
    url, fs, _ = storage
    clock = Clock()
    FakeTrainer(fs, url).save(0)
    events = f"{url}/events.out.tfevents.1700000000.host"
    written = tfrecord(0)
    fs.pipe_file(events, written)
    coord = coordinator(storage, clock, max_steps=1000, stall=90)
    coord.poll_once()
    for step in (100, 200, 300):
        clock.now += 10
        written += tfrecord(step, b"\x0a\x04loss")
        fs.pipe_file(events, written + tfrecord(step + 50)[:7])   # a record being written
        p = coord.poll_once()
        assert (p.step, p.events_step, p.latest_step) == (0, step, step)
    assert p.steps_per_sec == 10.0 and p.eta_secs == 70.0
    assert coord.judge(cluster()) is None          # finish needs a complete checkpoint


def test_after_a_restart_the_step_is_the_checkpoints_until_the_events_file_moves(storage):
    """The events file's steps past the newest checkpoint were lost with a restart: the
    restored trainers start again from the checkpoint, so its step is shown, not the old
    series' 1642 next to it, until the events file moves again."""
    url, fs, _ = storage
    clock = Clock()
    FakeTrainer(fs, url).save(1000)
    events = f"{url}/events.out.tfevents.1700000000.host"
    written = tfrecord(0) + tfrecord(1642, b"\x0a\x04loss")
    fs.pipe_file(events, written)
    coord = coordinator(storage, clock, max_steps=2000, stall=90)
    assert coord.poll_once().latest_step == 1642
    coord.note_restart()
    clock.now += 10
    p = coord.poll_once()
    assert (p.events_step, p.latest_step) == (None, 1000)
    clock.now += 10
    fs.pipe_file(events, written + tfrecord(1100, b"\x0a\x04loss"))   # the restored series
    p = coord.poll_once()
    assert (p.step, p.latest_step) == (1000, 1100)
