"""The progress line says what is happening: training (rate, ETA), restarting, finishing,
waiting for the evaluator (why, and for how long at most), stopping the ps; a job that
writes nothing into model_dir gets one line, once, that claims nothing it does not know
(launcher/output/progress.py and the coordinator's monitor)."""

from __future__ import annotations

import io

from launcher.monitors.coordinator import CoordinatorMonitor
from launcher.output.console import Console
from launcher.output.progress import JobState, progress_line
from launcher.records.events import EventLog
from orchestrator.checkpoints import Checkpoint
from orchestrator.coordinator import Coordinator, Progress
from orchestrator.decisions import TaskState

CKPT = Checkpoint("model.ckpt-939", "/m/model.ckpt-939", 939, "estimator", 1, 939)
ENDED = Progress(max_steps=939, checkpoint=CKPT, events_step=1008, steps_per_sec=67.0,
                 eta_secs=0.0, step_at=100.0)


def test_after_the_trainers_ended_no_rate_is_shown_but_the_evaluator_wait_and_its_bound():
    state = JobState(trainers_ended=True, evaluators=("evaluator:0",), ps=(),
                     ended_for=100.0, evaluator_timeout=900.0)
    line = progress_line(ENDED, 300, now=250.0, state=state)
    assert line == ("progress: step 1008/939 (100%) in the events file, training ended; "
                    "waiting for evaluator:0 "
                    "to evaluate the final checkpoint (step 939): TensorFlow's evaluator waits "
                    "EvalSpec.start_delay_secs (120s by default) before its first evaluation; "
                    "at most 13m20s more (timeouts.evaluator 900s), checkpoint model.ckpt-939")
    assert "steps/s" not in line and "no new step" not in line
    throttled = progress_line(Progress(**{**ENDED.__dict__, "evaluated_step": 500}), 300,
                              now=250.0, state=state)
    assert "its last evaluation was at step 500; TensorFlow's evaluator waits " \
           "EvalSpec.throttle_secs (600s by default) between two" in throttled
    done = progress_line(Progress(**{**ENDED.__dict__, "evaluated_step": 939}), 300,
                         state=state)
    assert "the final checkpoint (step 939) was evaluated; waiting for evaluator:0 to end" \
        in done


def test_restarting_finishing_and_stopping_the_ps():
    p = Progress(max_steps=8000, events_step=1, steps_per_sec=0.01, eta_secs=160000.0)
    restarting = progress_line(p, 5, restarts=1, state=JobState(restarting=("ps:0", "chief:0")))
    assert restarting == "progress: step 1/8000 (0%), restarting ps:0, chief:0, no complete " \
                         "checkpoint yet; 1 restart"
    finishing = progress_line(ENDED, 5, state=JobState(
        finishing="checkpoint model.ckpt-939 reached max_steps 939", trainers=("worker:1",)))
    assert "finishing (checkpoint model.ckpt-939 reached max_steps 939): waiting for " \
           "worker:1 to end" in finishing and "steps/s" not in finishing
    assert "training ended; stopping the parameter servers" in progress_line(
        ENDED, 5, state=JobState(trainers_ended=True, ps=("ps:0",)))


def test_hundreds_of_tasks_waited_for_are_folded_into_a_count():
    workers = tuple(f"worker:{i}" for i in range(500))
    finishing = progress_line(ENDED, 5, state=JobState(finishing="chief:0 exited 0",
                                                       trainers=workers))
    assert "waiting for worker:0, worker:1" in finishing
    assert "and 494 more (worker 500) to end" in finishing and "worker:499" not in finishing
    restarting = progress_line(ENDED, 5, state=JobState(restarting=workers))
    assert "and 494 more (worker 500)" in restarting and len(restarting) < 200


def monitor(tmp_path, clock) -> tuple[CoordinatorMonitor, io.StringIO]:
    err = io.StringIO()
    coordinator = Coordinator(str(tmp_path / "model"), max_steps=100, clock=clock)
    return CoordinatorMonitor(coordinator, Console(io.StringIO(), err),
                              EventLog(str(tmp_path / "e.jsonl")), clock=clock,
                              evaluator_timeout=900), err


def test_a_job_that_writes_nothing_into_model_dir_gets_one_line_not_one_every_5s(tmp_path):
    now = [0.0]
    mon, err = monitor(tmp_path, lambda: now[0])
    tasks = [TaskState("worker:0", "worker", running=True),
             TaskState("worker:1", "worker", running=True)]
    for _ in range(60):                   # 5 minutes, a tick every 5 s
        mon.coordinator.poll_once()
        mon.tick(tasks)
        now[0] += 5
    mon.close()
    lines = err.getvalue().splitlines()
    assert lines == ["tfcluster: progress: waiting for the first checkpoint",
                     "tfcluster: progress: no checkpoint or summary in model_dir yet after 30s"]


def test_the_monitor_knows_when_training_ended_and_who_is_waited_for(tmp_path):
    now = [0.0]
    mon, _ = monitor(tmp_path, lambda: now[0])
    tasks = [TaskState("chief:0", "chief", alive=False, exit_status="0", status=0,
                       started_at=1.0),
             TaskState("ps:0", "ps", running=True),
             TaskState("evaluator:0", "evaluator", running=True)]
    assert mon.job_state(tasks, 10.0).trainers_ended
    state = mon.job_state(tasks, 70.0)
    assert (state.ended_for, state.evaluators, state.ps) == (60.0, ("evaluator:0",), ("ps:0",))
    running = [TaskState("chief:0", "chief", alive=False, exit_status="0"),
               TaskState("worker:0", "worker", running=True)]
    assert mon.job_state(running, 80.0).finishing == "chief:0 exited 0"


def test_trainers_still_being_started_have_not_ended(tmp_path):
    """Tasks start in a pool while the monitors tick: a chief not started yet is not a
    chief that ended, and no "training ended" line comes before the job has started."""
    now = [0.0]
    mon, err = monitor(tmp_path, lambda: now[0])
    starting = [TaskState("ps:0", "ps", running=True), TaskState("chief:0", "chief")]
    assert not mon.job_state(starting, 0.0).trainers_ended
    mon.coordinator.poll_once()
    mon.tick(starting)
    mon.close()
    assert "training ended" not in err.getvalue()
    ended = [TaskState("ps:0", "ps", running=True),
             TaskState("chief:0", "chief", alive=False, status=0, started_at=0.0,
                       exit_status="0")]
    assert mon.job_state(ended, 1.0).trainers_ended
