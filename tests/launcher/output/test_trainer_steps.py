"""Progress from the freshest source: the trainers' own output (Estimator's step lines,
Keras' bar, global_step/sec, even lines the console hides) when model_dir says less; the
line names its source and age, and never says "no new step" while a trainer's output shows
steps moving. Also what the line says while model_dir has nothing of its own."""

from __future__ import annotations

import io

from support import FakeClock

from launcher.monitors.coordinator import CoordinatorMonitor
from launcher.output.console import Console
from launcher.output.live import status_words
from launcher.output.progress import output_progress, progress_line
from launcher.output.trainer_steps import TrainerSteps
from launcher.records.events import EventLog
from orchestrator.checkpoints import Checkpoint
from orchestrator.coordinator import Coordinator, Progress
from orchestrator.decisions import TaskState

CKPT0 = Checkpoint("model.ckpt-0", "/m/model.ckpt-0", 0, "estimator", 1, 0)


def test_estimator_s_step_lines_hidden_or_not_give_the_step():
    clock = FakeClock()
    c = Console(io.StringIO(), io.StringIO(), clock=clock)
    c.task_line("worker:0", "INFO:tensorflow:loss = 0.69, step = 101 (0.312 sec)")
    clock.sleep(2)
    c.task_line("chief:0", "I1201 07:12:01.000123 140 basic_session_run_hooks.py:262] "
                           "loss = 0.52, step = 240 (0.3 sec)")
    c.task_line("evaluator:0", "INFO:tensorflow:loss = 0.5, step = 900")   # not a trainer
    newest = c.steps.newest()
    assert (newest.step, newest.task, newest.at) == (240, "chief:0", 2.0)
    assert c.hidden == 3        # hidden from the console, read all the same


def test_keras_bars_count_steps_across_epochs():
    steps = TrainerSteps(FakeClock())
    for line in ["Epoch 1/3", "70/70 [==============================] - 22s 254ms/step",
                 "Epoch 2/3", "35/70 [=============>................] - ETA: 8s - loss: 4.6"]:
        steps.see("worker:0", line)
    assert steps.newest().step == 105
    keras3 = TrainerSteps(FakeClock())
    for line in ["Epoch 3/4", "\x1b[1m12/50\x1b[0m \x1b[32m━━━━\x1b[0m\x1b[37m━━━━━━━━\x1b[0m "
                 "\x1b[1m1s\x1b[0m 26ms/step - loss: 0.4"]:
        keras3.see("chief:0", line)
    assert keras3.newest().step == 112
    assert TrainerSteps().newest() is None
    other = TrainerSteps()
    other.see("chief:0", "3/10 files copied")           # not a bar
    assert other.newest() is None


def test_an_epoch_s_whole_redrawn_line_counts_as_its_last_state():
    """Keras 2's bar (tf.keras, TF docs' Keras MWMS tutorial) is redrawn with \\r and \\b and
    ends with a newline once per epoch: that whole line's step is its last state (epoch 3's
    70/70: step 210), not its first redraw's 1/70 (step 141, once shown after step 166)."""
    console = Console(io.StringIO(), io.StringIO(), quiet=True)
    bar = "{:>2}/70 [{}] - ETA: 0s - loss: 4.6024"
    epoch = "".join("\r" + bar.format(i, "=" * (i * 30 // 70)) + "\b" * 60
                    for i in range(1, 71)) + "\r70/70 [====] - 8s 116ms/step - loss: 2.3012"
    for line in ["Epoch 1/3", epoch, "Epoch 2/3", epoch, "Epoch 3/3",
                 "\r 26/70 [===>...] - ETA: 5s"]:
        console.shows("worker:0", line)
    assert console.steps.newest().step == 166
    console.shows("worker:0", epoch)
    assert console.steps.newest().step == 210


def test_global_step_sec_gives_an_estimate_that_says_so():
    clock = FakeClock()
    steps = TrainerSteps(clock)
    for rate in (40.0, 50.0, 60.0):
        clock.sleep(2)
        steps.see("chief:0", f"INFO:tensorflow:global_step/sec: {rate}")
    assert steps.estimate(since=0.0) == (300, "chief:0")      # 2 s x (40 + 50 + 60)
    clock.sleep(3)
    p = Progress(max_steps=4000, checkpoint=CKPT0, step_at=0.0)
    out = output_progress(steps, p, clock(), since=0.0)
    assert (out.step, out.estimated, out.rate) == (300, True, 60.0)
    assert progress_line(p, 30, now=clock(), output=out, moving_at=steps.moving_at()) == (
        "progress: step ~300/4000 (7%), estimated from chief:0's global_step/sec 3s ago, "
        "60.0 steps/s, checkpoint model.ckpt-0")


def test_tensorflow_s_step_seen_twice_warning_is_a_step():
    steps = TrainerSteps(FakeClock())
    steps.see("chief:0", "WARNING:tensorflow:It seems that global step (tf.train.get_global_"
                         "step) has not been increased. Current value (could be stable): 388 "
                         "vs previous value: 388. You could increase the global step by ...")
    assert steps.newest().step == 388


def test_the_line_takes_the_output_s_step_names_it_and_its_age():
    """A TF1 job saving every 600 s: model_dir still at step 0 while the chief logs its
    steps; the line moves with the output and never says "no new step"."""
    clock = FakeClock()
    steps = TrainerSteps(clock)
    p = Progress(max_steps=400, checkpoint=CKPT0, step_at=0.0, steps_per_sec=None)
    lines = []
    for step in (100, 200, 300):
        clock.sleep(12)
        steps.see("chief:0", f"INFO:tensorflow:loss = 0.3, step = {step} (2.1 sec)")
        clock.sleep(2)
        out = output_progress(steps, p, clock(), since=0.0)
        lines.append(progress_line(p, clock(), now=clock(), output=out,
                                   moving_at=steps.moving_at()))
    assert lines == [f"progress: step {s}/400 ({s // 4}%), from chief:0's output 2s ago, "
                     f"checkpoint model.ckpt-0" for s in (100, 200, 300)]
    assert status_words(p, 0, 400, None, output_progress(steps, p, clock(), 0.0)) == \
        "step 300/400 (75%) · from chief:0's output 2s ago"


def test_no_new_step_only_when_no_source_moved():
    p = Progress(max_steps=400, checkpoint=CKPT0, step_at=0.0)
    assert "no new step for 45s" in progress_line(p, 45, now=45.0)
    moving = progress_line(p, 45, now=45.0, moving_at=43.0)
    assert "no new step" not in moving
    assert "steps moving in the trainers' output 2s ago, none new in model_dir for 45s" in moving
    steps = TrainerSteps(FakeClock())
    steps.see("chief:0", "loss = 0.3, step = 120 (2.1 sec)")
    # one line: its pace is not known; it is stated with its age for a minute, then quiet
    young = output_progress(steps, p, 40.0, 0.0)
    assert "step 120/400 (30%), from chief:0's output 40s ago" in progress_line(
        p, 40, now=40.0, output=young)
    stale = output_progress(steps, p, 65.0, 0.0)
    assert "no new step for 1m05s (chief:0's output)" in progress_line(p, 65, now=65.0,
                                                                      output=stale)


def test_the_events_file_s_step_says_where_it_comes_from():
    ckpt = Checkpoint("model.ckpt-2", "/m/model.ckpt-2", 2, "estimator", 1, 2)
    line = progress_line(Progress(max_steps=2000, checkpoint=ckpt, events_step=1642), 5)
    assert line == "progress: step 1642/2000 (82%) in the events file, checkpoint model.ckpt-2"


def monitor(tmp_path, clock):
    err = io.StringIO()
    console = Console(io.StringIO(), err, clock=clock)
    coordinator = Coordinator(str(tmp_path / "model"), max_steps=100, clock=clock)
    return CoordinatorMonitor(coordinator, console, EventLog(str(tmp_path / "e.jsonl")),
                              clock=clock), console, err


def test_nothing_in_model_dir_but_a_backup_below_says_so(tmp_path):
    """Keras' BackupAndRestore writes model_dir/backup/chief/: no longer "nothing yet"."""
    clock = FakeClock()
    mon, _, err = monitor(tmp_path, clock)
    (tmp_path / "model" / "backup" / "chief").mkdir(parents=True)
    (tmp_path / "model" / "backup" / "chief" / "checkpoint").write_text(
        'model_checkpoint_path: "ckpt-1"\n')
    tasks = [TaskState("chief:0", "chief", running=True)]
    for _ in range(10):
        mon.coordinator.poll_once()
        mon.tick(tasks)
        clock.sleep(5)
    assert err.getvalue().splitlines()[-1] == (
        "tfcluster: progress: no checkpoint or summary at model_dir's top yet after 30s; a "
        "checkpoint in backup/chief/ (Keras' BackupAndRestore backup, if it is one)")


def test_a_model_dir_of_the_script_s_own_is_named_once(tmp_path):
    clock = FakeClock()
    mon, console, err = monitor(tmp_path, clock)
    tasks = [TaskState("chief:0", "chief", running=True)]
    record = ("INFO:tensorflow:Using config: {'_model_dir': '/tmp/multiworker', "
              "'_tf_random_seed': None, '_save_summary_steps': 100, ")
    console.task_line("chief:0", record)
    for _ in range(3):
        mon.tick(tasks)
        clock.sleep(5)
    named = [line for line in err.getvalue().splitlines() if "/tmp/multiworker" in line]
    assert named == [
        f"tfcluster: chief:0 writes into /tmp/multiworker, not into the spec's model_dir "
        f"{tmp_path / 'model'} (its Estimator's \"Using config\" record): the script sets its "
        f"own model_dir; the launcher follows no checkpoint, step or evaluation there"]
    same = monitor(tmp_path, clock)
    same[1].task_line("chief:0", record.replace("/tmp/multiworker", str(tmp_path / "model")))
    same[0].tick(tasks)
    assert "writes into" not in same[2].getvalue()


def test_an_open_events_file_outside_model_dir_is_found(tmp_path):
    """A real process of this machine holding a TensorFlow file open elsewhere."""
    import os
    import subprocess
    import sys

    from launcher.monitors.own_model_dir import open_tf_file, outside

    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    events = elsewhere / "events.out.tfevents.1.host"
    proc = subprocess.Popen(
        [sys.executable, "-c", f"f = open({str(events)!r}, 'w'); import time; time.sleep(60)"],
        env={**os.environ, "TFCLUSTER_MODEL_DIR": str(tmp_path / "model")})
    try:
        for _ in range(200):
            found = open_tf_file(proc.pid)
            if found:
                break
            import time
            time.sleep(0.05)
        assert found == str(events)
        assert outside(found, str(tmp_path / "model"))
        assert not outside(found, str(tmp_path))
    finally:
        proc.kill()
        proc.wait()
    assert open_tf_file(os.getpid()) is None      # not a task: no TFCLUSTER_MODEL_DIR


def test_rates_after_a_step_line_estimate_from_that_step():
    """A TF1 job: TF's warning showed step 14 once, then only global_step/sec lines came;
    the line goes on from 14, and does not call step 14 'no new step for 20s'."""
    clock = FakeClock()
    steps = TrainerSteps(clock)
    steps.see("chief:0", "WARNING:tensorflow:It seems that global step (tf.train.get_global_"
                         "step) has not been increased. Current value (could be stable): 14 "
                         "vs previous value: 14.")
    for _ in range(10):
        clock.sleep(2)
        steps.see("chief:0", "INFO:tensorflow:global_step/sec: 50")
    p = Progress(max_steps=5000, checkpoint=CKPT0, step_at=0.0)
    out = output_progress(steps, p, clock(), since=0.0)
    assert (out.step, out.estimated, out.age) == (14 + 1000, True, 0.0)
    assert "no new step" not in progress_line(p, 20, now=clock(), output=out,
                                              moving_at=steps.moving_at())


def test_the_output_s_own_cadence_says_when_it_is_quiet():
    """An Estimator logs its step every 100 steps: 20 s apart at 5 steps/s. 15 s after its
    last line it is not 'no new step'; 45 s after, it is."""
    clock = FakeClock()
    steps = TrainerSteps(clock)
    for step in (0, 100, 200):
        steps.see("chief:0", f"INFO:tensorflow:loss = 0.3, step = {step} (20.0 sec)")
        clock.sleep(20)
    p = Progress(max_steps=1000, checkpoint=CKPT0, step_at=0.0)
    clock.now = 55.0
    line = progress_line(p, 55, now=55.0, output=output_progress(steps, p, 55.0, 0.0),
                         moving_at=steps.moving(55.0, 10.0))
    assert line == "progress: step 200/1000 (20%), from chief:0's output 15s ago, " \
                   "checkpoint model.ckpt-0"
    line = progress_line(p, 85, now=85.0, output=output_progress(steps, p, 85.0, 0.0),
                         moving_at=steps.moving(85.0, 10.0))
    assert "no new step for 45s (chief:0's output)" in line


def test_an_older_output_step_gives_way_to_a_fresher_model_dir():
    """A worker's step line at 25 s (step 202) and the events file's step 201 seen at 30 s:
    the line is model_dir's, the fresher source, until the output says more."""
    clock = FakeClock()
    steps = TrainerSteps(clock)
    clock.now = 25.0
    steps.see("worker:0", "INFO:tensorflow:loss = 0.3, step = 202 (0.3 sec)")
    ckpt = Checkpoint("model.ckpt-200", "/m/model.ckpt-200", 200, "estimator", 1, 200)
    p = Progress(max_steps=602, checkpoint=ckpt, events_step=201, step_at=30.0,
                 steps_per_sec=17.0)
    assert output_progress(steps, p, 45.0, 0.0) is None
    clock.now = 31.0
    steps.see("worker:0", "INFO:tensorflow:loss = 0.3, step = 302 (6.0 sec)")
    assert output_progress(steps, p, 32.0, 0.0).step == 302     # fresher: it wins


def test_an_age_that_grows_is_no_new_line(tmp_path):
    """'from chief:0's output 0s ago' then '5s ago': the same news, printed once (again
    after 30 s at most)."""
    clock = FakeClock()
    mon, console, err = monitor(tmp_path, clock)
    tasks = [TaskState("chief:0", "chief", running=True)]
    console.task_line("chief:0", "INFO:tensorflow:loss = 0.3, step = 40 (2.0 sec)")
    for _ in range(4):                        # 0, 5, 10, 15 s
        mon.tick(tasks)
        clock.sleep(5)
    lines = [line for line in err.getvalue().splitlines() if "from chief:0's output" in line]
    assert len(lines) == 1 and lines[0].startswith("tfcluster: progress: step 40/100 (40%), "
                                                   "from chief:0's output "), lines
    assert "no new step" not in err.getvalue()      # one line: its pace is not known yet


def test_a_step_line_and_a_rate_line_together_keep_the_pace():
    """Estimator writes 'step = 100' and 'global_step/sec' at the same step: its pace is
    20 s, not the instant between the two lines."""
    clock = FakeClock()
    steps = TrainerSteps(clock)
    for step in (0, 100):
        steps.see("chief:0", f"INFO:tensorflow:loss = 0.3, step = {step} (20.0 sec)")
        steps.see("chief:0", "INFO:tensorflow:global_step/sec: 5")
        clock.sleep(20)
    assert steps.quiet_after(10.0) == 40.0
    assert steps.moving(55.0, 10.0) == 20.0
