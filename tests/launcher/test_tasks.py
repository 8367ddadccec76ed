"""The one task snapshot (orchestrator.decisions.TaskState) as launcher/tasks.py takes it:
what monitors, the end rules and every table read of a task at one moment."""

from __future__ import annotations

import signal

from launcher.output.summary import task_rows
from launcher.plan import TaskPlan
from launcher.tasks import TaskRun


class Handle:
    pid = 4321


def run_of(**state) -> TaskRun:
    task = TaskPlan("worker", 1, "localhost", 2223, ["python", "train.py"], {})
    return TaskRun(task, "/runs/r/logs/worker-1.log", **state)


def test_a_running_task():
    run = run_of(handle=Handle(), started=10.0, last_output=14.0)
    run.tail.append("step 7")
    t = run.snapshot(now=15.0)
    assert (t.name, t.address, t.alive, t.running, t.exit_status) == \
        ("worker:1", "localhost:2223", True, True, None)
    assert (t.words(), t.duration, t.quiet_for, t.last_line, t.pid) == \
        ("running", 5.0, 1.0, "step 7", 4321)


def test_an_ended_task_says_how_in_words():
    stopped = run_of(handle=Handle(), started=1.0, ended=4.0, status=-signal.SIGTERM,
                     stopped=True).snapshot(now=9.0)
    killed = run_of(handle=Handle(), started=1.0, ended=4.0, status=-signal.SIGKILL
                    ).snapshot(now=9.0)
    failed = run_of(handle=Handle(), started=1.0, ended=4.0, status=1).snapshot(now=9.0)
    assert [t.exit_status for t in (stopped, killed, failed)] == \
        ["stopped (SIGTERM)", "killed (SIGKILL)", "1"]
    assert not stopped.alive and stopped.duration == 3.0
    assert run_of().snapshot(now=0.0).words() == "not started"


def test_a_task_about_to_restart_is_alive_and_its_exit_still_shows_in_tables():
    run = run_of(handle=Handle(), started=1.0, ended=4.0, status=-signal.SIGKILL, restarts=1)
    t = run.snapshot(now=5.0, restarting=True)
    assert t.alive and t.restarting and not t.running and t.exit_status is None
    [row] = task_rows([t])
    assert row == {"task": "worker:1", "address": "localhost:2223", "gpus": None,
                   "exit": -signal.SIGKILL, "status": "killed (SIGKILL)", "stopped": False,
                   "restarts": 1, "duration": 3.0, "log": "/runs/r/logs/worker-1.log"}


def test_the_snapshot_made_the_fast_way_is_the_dataclass_a_constructor_makes():
    """TaskState.of (no frozen __init__: the job loop makes one per task per tick) gives an
    equal, frozen TaskState, and refuses a field left out."""
    import dataclasses

    import pytest

    from orchestrator.decisions import TaskState

    t = run_of(handle=Handle(), started=10.0, last_output=14.0).snapshot(now=15.0)
    assert type(t) is TaskState and t == TaskState(**dataclasses.asdict(t))
    with pytest.raises(dataclasses.FrozenInstanceError):
        t.alive = False     # type: ignore[misc]
    with pytest.raises(TypeError, match="evaluated"):
        TaskState.of(**{k: v for k, v in dataclasses.asdict(t).items() if k != "evaluated"})
