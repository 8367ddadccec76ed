"""The end rules as a pure function: who is stopped when, once training is done."""

from __future__ import annotations

from launcher.ending import (
    EVAL_QUIET,
    WORKER_GRACE,
    EndRules,
    EndStep,
    Moments,
    TrainingView,
    end_step,
)
from launcher.spec import Timeouts
from orchestrator.decisions import TaskState

TIMEOUTS = Timeouts(finish=30.0, evaluator=900.0, poll=1.0)


def cluster(**states) -> list[TaskState]:
    """ps:0, chief:0, worker:0, worker:1, evaluator:0 running unless given otherwise."""
    out = []
    for name in ("ps:0", "chief:0", "worker:0", "worker:1", "evaluator:0"):
        state = states.get(name.replace(":", "_"), {})
        out.append(TaskState(name, name.split(":")[0], **{"running": True, **state}))
    return out


TRAINING = TrainingView(max_steps=600)


def step(tasks, training=TRAINING, now=100.0, sync=False,
         trainers_done_at=None) -> EndStep:
    return end_step(now, Moments(trainers_done=trainers_done_at), tasks, training,
                    EndRules(TIMEOUTS, sync))


EXITED = {"running": False, "status": 0, "ended_at": 100.0 - WORKER_GRACE}


def test_workers_go_soon_after_the_chief_of_asynchronous_training_exited():
    just = step(cluster(chief_0=dict(EXITED, ended_at=100.5 - WORKER_GRACE)))
    assert just == EndStep()                # time for workers that end with it
    s = step(cluster(chief_0=EXITED), TrainingView(max_steps=600, final_step=600))
    assert s.stop == ("worker:0", "worker:1")
    assert s.reason.startswith("chief:0 saved its final checkpoint (step 600) and exited: ")


def test_a_chief_that_saved_nothing_is_not_said_to_have_saved():
    s = step(cluster(chief_0=EXITED))                  # no checkpoint in model_dir
    assert s.reason == ("chief:0 exited 0 (no checkpoint in model_dir): worker:0, worker:1 "
                        "add nothing to the model after it")


def test_workers_in_start_delay_or_serving_a_keras_coordinator_go_a_poll_after_the_chief():
    asleep = cluster(chief_0=dict(EXITED, ended_at=99.0),
                     worker_0={"started_at": 96.0}, worker_1={"started_at": 80.0})
    assert step(asleep).stop == ("worker:0",)     # 4 s into its 5 s delay; worker:1 trains
    servers = cluster(chief_0=dict(EXITED, ended_at=99.0))
    pss = end_step(100.0, Moments(), servers, TRAINING, EndRules(TIMEOUTS, estimator=False))
    assert pss.stop == ("worker:0", "worker:1")


def test_synchronous_trainers_get_the_finish_window():
    tasks = [t for t in cluster(chief_0=EXITED) if t.type != "ps"]
    reached = TrainingView(600, reached_at=90.0, latest_step=900)
    assert step(tasks, reached, now=119.0, sync=True) == EndStep()
    assert step(tasks, reached, now=120.0, sync=True).stop == ("worker:0", "worker:1")
    chief_at_90 = Moments(training_done=90.0)
    chief_done = end_step(119.0, chief_at_90, tasks, TRAINING, EndRules(TIMEOUTS, True))
    assert chief_done == EndStep()          # no max_steps seen: from the chief's exit
    chief_done = end_step(120.0, chief_at_90, tasks, TRAINING, EndRules(TIMEOUTS, True))
    assert chief_done.stop == ("worker:0", "worker:1")


def test_trainers_that_keep_training_past_max_steps_are_stopped_at_once():
    reached = TrainingView(600, reached_at=99.0, latest_step=605, final_step=603)
    assert step(cluster(), reached) == EndStep()          # overshoot of async updates
    on = TrainingView(600, reached_at=99.0, latest_step=650, final_step=650)
    s = step(cluster(), on)
    assert s.stop == ("chief:0", "worker:0", "worker:1")
    assert "still moving: the script ignores max_steps" in s.reason


def test_max_steps_seen_in_the_events_file_waits_for_a_checkpoint_at_max_steps():
    """Stopping before any checkpoint reached max_steps would throw the steps away: the
    trainers get timeouts.finish to write one."""
    events = TrainingView(600, reached_at=99.0, latest_step=900,
                          final_step=580)
    assert step(cluster(), events, now=128.0) == EndStep()
    assert step(cluster(), events, now=129.0).stop == ("chief:0", "worker:0", "worker:1")


def test_a_chief_that_evaluates_after_training_gets_timeouts_finish():
    """TonY's example runs classifier.evaluate on the chief after train_and_evaluate: its
    step does not move, so it is not stopped as a runaway trainer."""
    tasks = cluster(worker_0=EXITED, worker_1=EXITED)
    reached = TrainingView(600, reached_at=70.0, latest_step=601)
    assert step(tasks, reached, now=99.0) == EndStep()
    assert step(tasks, reached, now=100.0).stop == ("chief:0",)


def test_ps_stopped_once_no_trainer_runs_or_is_due_to_restart():
    done = dict(chief_0=EXITED, worker_0=EXITED, worker_1=EXITED)
    assert step(cluster(**done)).stop == ("ps:0",)
    due = dict(done, worker_1={"running": False, "status": -9, "restarting": True})
    assert step(cluster(**due)) == EndStep()


TRAINED = dict(ps_0={"running": False, "status": -15}, chief_0=EXITED, worker_0=EXITED,
               worker_1=EXITED)


def test_the_evaluator_is_stopped_once_it_evaluated_the_final_checkpoint_and_is_idle():
    busy = dict(TRAINED, evaluator_0={"running": True, "quiet_for": 0.5})
    idle = dict(TRAINED, evaluator_0={"running": True, "quiet_for": EVAL_QUIET})
    view = TrainingView(600, final_step=602, evaluated_step=602)
    assert step(cluster(**busy), view, trainers_done_at=99.0) == EndStep()   # exporting
    assert step(cluster(**idle), view, trainers_done_at=99.0).stop == ("evaluator:0",)
    waits = dict(TRAINED, evaluator_0={"running": True, "quiet_for": 0.1, "last_line":
                                       "INFO:tensorflow:Waiting 0.999646 secs before "
                                       "starting next eval run."})
    assert step(cluster(**waits), view, trainers_done_at=99.0).stop == ("evaluator:0",)
    before = TrainingView(600, final_step=602, evaluated_step=580)
    assert step(cluster(**idle), before, trainers_done_at=99.0) == EndStep()


def test_training_short_of_max_steps_makes_the_final_checkpoint_the_target():
    idle = dict(TRAINED, evaluator_0={"running": True, "quiet_for": EVAL_QUIET})
    view = TrainingView(600, final_step=300, evaluated_step=300)
    assert step(cluster(**idle), view, trainers_done_at=99.0).stop == ("evaluator:0",)
    assert step(cluster(**idle), TrainingView(None, final_step=300, evaluated_step=300),
                trainers_done_at=99.0).stop == ("evaluator:0",)


def test_the_evaluator_window_runs_from_the_end_of_the_trainers():
    idle = dict(TRAINED, evaluator_0={"running": True, "quiet_for": EVAL_QUIET})
    view = TrainingView(600, final_step=602, evaluated_step=None)
    assert step(cluster(**idle), view, now=999.0, trainers_done_at=100.0) == EndStep()
    s = step(cluster(**idle), view, now=1000.0, trainers_done_at=100.0)
    assert s.stop == ("evaluator:0",) and "timeouts.evaluator" in s.reason


def test_an_evaluator_due_to_restart_is_waited_for_within_the_window():
    due = dict(TRAINED, evaluator_0={"running": False, "status": 1, "restarting": True})
    assert step(cluster(**due), now=500.0, trainers_done_at=100.0) == EndStep()
    assert step(cluster(**due), now=1000.0, trainers_done_at=100.0).done


def test_done_when_nothing_runs():
    ended = dict(TRAINED, evaluator_0=EXITED)
    assert step(cluster(**ended)).done
