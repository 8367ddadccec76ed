"""An events file whose steps go backwards (TF1's MonitoredTrainingSession restoring a
checkpoint after a session error) is read as series: the step shown is the newest series',
and the events say max_steps was reached only while the newest series is read alone."""

from __future__ import annotations

from coordinator.tf_writes import FakeTrainer, tfrecord
from test_coordinator import Clock, cluster, coordinator

from orchestrator.step_series import StepSeries


def test_the_issue_series_shows_the_restored_step_not_the_highest():
    series = StepSeries()
    restores = series.add([1300, 1325, 1350, 1374, 1452, 1477, 37, 62, 67, 91, 118, 136, 1554])
    assert restores == [(1477, 37)]
    assert series.newest == 136            # not 1554: that is the older series going on
    assert series.interleaved and not series.monotonic


def test_a_short_restore_as_tensorflow_writes_it():
    # the steps of tests/ending/jobs/tf1_restore.py's events files (TF 2.15, the chief
    # restored model.ckpt-30 after an error at step 33 or 36)
    for steps, restore in (([1, 1, 6, 10, 15, 19, 24, 28, 30, 33, 30, 38, 43, 47], (33, 30)),
                           ([1, 1, 5, 10, 14, 18, 22, 27, 30, 31, 36, 30, 41, 45], (36, 30))):
        series = StepSeries()
        assert series.add(steps) == [restore]
        assert (series.newest, series.lasts, series.interleaved) == (steps[-1], [steps[-1]],
                                                                     False)


def test_a_restored_series_that_catches_up_is_the_only_one_left():
    series = StepSeries()
    series.add([0, 0, 10, 10, 20, 30, 40, 50, 60, 70])     # several records per step
    assert series.monotonic and series.newest == 70
    assert series.add([40, 50, 60, 70, 80]) == [(70, 40)]
    assert series.newest == 80 and series.lasts == [80] and not series.interleaved


def write_events(fs, url, steps) -> None:
    path = f"{url}/events.out.tfevents.1700000000.host"
    old = fs.cat_file(path) if fs.exists(path) else b""
    fs.pipe_file(path, old + b"".join(tfrecord(s, b"\x0a\x04loss") for s in steps))


def test_a_restore_shows_the_restored_step_and_its_series_may_finish(storage):
    url, fs, _ = storage
    clock = Clock()
    FakeTrainer(fs, url).save(40)
    seen = []
    coord = coordinator(storage, clock, max_steps=100, stall=600,
                        on_change=lambda event, fields: seen.append((event, fields)))
    write_events(fs, url, range(0, 80, 10))
    assert coord.poll_once().events_step == 70
    clock.now += 10
    write_events(fs, url, (40, 50, 60))
    p = coord.poll_once()
    assert (p.events_step, p.restored, p.steps_per_sec) == (60, (70, 40), None)
    assert ("restore", {"step": 70, "restored_to": 40}) in seen
    assert coord.judge(cluster()) is None
    write_events(fs, url, range(70, 110, 10))        # the restored series alone: read as such
    coord.poll_once()
    assert coord.judge(cluster()).action == "finish"


def test_interleaved_series_never_finish_from_events(storage):
    url, fs, _ = storage
    clock = Clock()
    FakeTrainer(fs, url).save(200)
    coord = coordinator(storage, clock, max_steps=2000, stall=600)
    write_events(fs, url, [1300, 1325, 1350, 1374, 1452, 1477, 37, 62, 67, 91, 118, 136, 1554])
    p = coord.poll_once()
    assert (p.events_step, p.events_interleaved, p.latest_step) == (136, True, 200)
    write_events(fs, url, [1800, 2000, 2100])         # the older series goes past max_steps
    p = coord.poll_once()
    assert p.events_step == 136
    assert coord.judge(cluster()) is None             # only a checkpoint may say it now
    FakeTrainer(fs, url).save(2000)
    coord.poll_once()
    assert coord.judge(cluster()).action == "finish"


def test_a_monotonic_events_file_still_finishes_at_max_steps(storage):
    url, fs, _ = storage
    clock = Clock()
    FakeTrainer(fs, url).save(0)
    events = f"{url}/events.out.tfevents.1700000000.host"
    coord = coordinator(storage, clock, max_steps=100, stall=600)
    fs.pipe_file(events, b"".join(tfrecord(s) for s in range(0, 110, 10)))
    coord.poll_once()
    verdict = coord.judge(cluster())
    assert verdict.action == "finish" and "step 100 in the chief's events file" in verdict.reason
