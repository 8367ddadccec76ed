"""Frozen tasks (SIGSTOP: alive, silent) in real TensorFlow jobs (Estimator, TF 2.15), and a
ps that never serves: the launcher asks every task's TF server over gRPC, names the one
that stopped answering after ``timeouts.unresponsive``, kills it and applies its restart
policy; a ps that never answers fails the job, naming it. A frozen ps, killed and restarted
with the whole cluster, is the second fault of test_kills.py's Estimator job (one run for
both faults). The repeated campaign (SIGSTOP of a ps, a worker, the chief) is
bench/fault_campaign.py."""

from __future__ import annotations

import re
import sys

import pytest
from harness import (
    LaunchRun,
    detected_in,
    job_spec,
    write_spec,
)
from support import events, run_dir, run_launch

MAX_STEPS, SAVE_STEPS, UNRESPONSIVE = 300, 50, 8
PROBE_PERIOD = 2    # launcher.monitors.liveness.PROBE_PERIOD

pytestmark = [pytest.mark.tf, pytest.mark.slow]


def frozen_job(tmp_path, **restart) -> LaunchRun:
    doc = job_spec("estimator", tmp_path, MAX_STEPS, SAVE_STEPS, sleep=0.05)
    doc["timeouts"].update(finish=5, unresponsive=UNRESPONSIVE)
    doc["restart"].update(restart)
    return LaunchRun(write_spec(tmp_path, doc))


def test_frozen_worker_under_policy_never_fails_the_job_naming_it(tmp_path):
    run = frozen_job(tmp_path, worker={"policy": "never"})
    assert run.wait_for_step(60, timeout=240), run.stderr_text()[-3000:]
    frozen = run.freeze("worker:0")
    status = run.wait(timeout=120)
    stderr = run.stderr_text()
    assert status == 1, stderr[-4000:]
    assert re.search(rf"job FAILED \(exit status 1\) after [\d.]+s: worker:0 \(localhost:\d+\) "
                     rf"has not answered TensorFlow's gRPC for {UNRESPONSIVE} s; restart "
                     rf"policy of worker is never", stderr), stderr[-3000:]
    assert detected_in(run_dir(tmp_path), frozen) <= UNRESPONSIVE + PROBE_PERIOD + 0.5
    assert not run.leftovers(), "processes left behind"


def test_a_ps_that_never_answers_fails_the_job_naming_it(tmp_path):
    # a real TF chief, and a ps whose command runs no TensorFlow server (it sleeps): the
    # chief would wait for it for ever ("CreateSession still waiting")
    doc = job_spec("estimator", tmp_path, MAX_STEPS, SAVE_STEPS, workers=0)
    doc["roles"] = {"ps": {"command": [sys.executable, "-c", "import time; time.sleep(600)"]}}
    doc["timeouts"].update(start=8, kill=2)
    done = run_launch(str(write_spec(tmp_path, doc)), timeout=120)
    assert done.returncode == 1, done.stderr
    assert re.search(r"job FAILED \(exit status 1\) after [\d.]+s: ps:0 \(localhost:\d+\) did "
                     r"not answer TensorFlow's gRPC within timeouts.start = 8 s \(last probe: "
                     r"UNAVAILABLE\); the trainers cannot train without it", done.stderr), \
        done.stderr
    stopped = {e["task"] for e in events(tmp_path) if e["event"] == "task_exited"}
    assert stopped == {"ps:0", "chief:0"}
