"""kill -9 on real TensorFlow jobs (Estimator on TF 2.15, ParameterServerStrategy on TF 2.21):
a few representative kills at seeded moments. Each run must end in success with the newest
checkpoint complete, readable and at or past max_steps, lose no more than one checkpoint
interval per kill, and leave no process behind. The Estimator job's second fault is a frozen
ps (SIGSTOP: alive, silent), which the launcher finds by asking its TF server over gRPC,
kills and restarts with the whole cluster (the local case of tests/slurm/test_slurm_frozen.py
and tests/docker/test_docker_frozen.py; a SIGKILLed ps is the PSS job's). The launcher's own
SIGKILL is tested with stand-in tasks (test_restarts_local.py); the repeated campaign,
evaluator and launcher kills on TensorFlow jobs included, is bench/fault_campaign.py."""

from __future__ import annotations

import json
import random
import time

import pytest
from harness import (
    PY_TF221,
    LaunchRun,
    check_ps_recovered,
    job_spec,
    lost_steps,
    newest_checkpoint,
    resumed_after,
    write_spec,
)
from support import run_dir

MAX_STEPS, SAVE_STEPS = 600, 100
SLACK = 10      # steps between two progress lines, and asynchronous overshoot
UNRESPONSIVE = 8    # timeouts.unresponsive of the Estimator job (its frozen ps)
PROBE_PERIOD = 2    # launcher.monitors.liveness.PROBE_PERIOD

pytestmark = [pytest.mark.tf, pytest.mark.slow]


def restarts_of(tmp_path) -> dict[str, int]:
    (run_dir,) = (tmp_path / "runs").iterdir()
    doc = json.loads((run_dir / "summary.json").read_text())
    return {row["task"]: row["restarts"] for row in doc["tasks"]}


def kill_during_training(run: LaunchRun, plan: list[tuple[str, int]],
                         freeze: tuple[str, ...] = ()) -> None:
    """Kill (or, for a target in ``freeze``, SIGSTOP) each target once training reached its
    step, then wait until the lost part is back at work before the next kill (a restarted TF
    task needs seconds to start; without the wait a fast chief can finish before a
    restarted worker trained at all)."""
    for target, step in plan:
        assert run.wait_for_step(step, timeout=240), run.stderr_text()[-3000:]
        if target in freeze:
            run.freeze(target)
        else:
            run.kill(target)
        deadline = time.monotonic() + 240
        while resumed_after([run], run.kills[-1]) is None:
            assert run.proc.poll() is None, f"job ended before {target} was back at work"
            assert time.monotonic() < deadline, f"{target} not back at work within 240 s"
            time.sleep(0.2)


def assert_survived(run: LaunchRun, tmp_path, python: str | None) -> None:
    """``python`` reads the newest checkpoint whole (None: the caller reads it)."""
    status = run.wait(timeout=420)
    stderr = run.stderr_text()
    assert status == 0, stderr[-4000:]
    if python is not None:
        name, step, error = newest_checkpoint(tmp_path / "model", python)
        assert error is None, f"newest checkpoint {name} is not readable: {error}"
        assert step is not None and step >= MAX_STEPS, (name, step)
    for kill in run.kills:
        assert resumed_after([run], kill) is not None, f"no training after killing {kill}"
        assert lost_steps([run], kill) <= SAVE_STEPS + SLACK, kill
    assert not run.leftovers(), "processes left behind"


def test_estimator_survives_a_killed_worker_then_a_frozen_ps(tmp_path):
    rng = random.Random(7)
    doc = job_spec("estimator", tmp_path, MAX_STEPS, SAVE_STEPS, sleep=0.05)
    doc["timeouts"].update(finish=5, unresponsive=UNRESPONSIVE)
    run = LaunchRun(write_spec(tmp_path, doc))
    kill_during_training(run, [("worker:0", rng.randint(100, 200)),
                               ("ps:0", rng.randint(300, 400))], freeze=("ps:0",))
    assert_survived(run, tmp_path, None)
    assert "worker:0 was killed by SIGKILL; restarting worker:0" in run.stderr_text()
    # the frozen ps: named within timeouts.unresponsive, alone lost, SIGKILLed first, the
    # cluster restarted; the newest checkpoint read whole by TensorFlow, at max_steps
    check_ps_recovered(run, run.kills[-1], run_dir(tmp_path), tmp_path / "model",
                       "localhost", UNRESPONSIVE, MAX_STEPS, PROBE_PERIOD)
    assert restarts_of(tmp_path) == {"ps:0": 1, "chief:0": 1, "worker:0": 2}


def test_pss_survives_a_lost_coordinator_then_a_lost_ps(tmp_path):
    rng = random.Random(11)
    doc = job_spec("pss", tmp_path, MAX_STEPS, SAVE_STEPS)
    run = LaunchRun(write_spec(tmp_path, doc))
    kill_during_training(run, [("chief:0", rng.randint(150, 250)),
                               ("ps:0", rng.randint(350, 450))])
    assert_survived(run, tmp_path, PY_TF221)
    assert ("ps:0 was killed by SIGKILL; restarting the whole cluster from the newest "
            "checkpoint") in run.stderr_text()
    restarts = restarts_of(tmp_path)
    assert restarts == {"ps:0": 1, "chief:0": 2, "worker:0": 1}
