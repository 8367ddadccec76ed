"""Elastic workers on a real ParameterServerStrategy job (TensorFlow 2.21): a worker killed
for good (``restart.worker.max_restarts`` 0, so its one loss spends its restarts) no longer
ends the job while ``roles.worker.minimum`` holds. The coordinator reschedules the lost
worker's closures on the other worker (TF's ClusterCoordinator), the launcher names the lost
worker and the shard no one reads, and the job ends 0 at max_steps with one worker fewer.
The rules themselves (the minimum broken, a host that returns, MWMS refused) are
tests/launcher/test_elastic.py's, on the scripted backend."""

from __future__ import annotations

import json

import pytest
from harness import PY_TF221, LaunchRun, job_spec, newest_checkpoint, write_spec
from support import run_dir

MAX_STEPS, SAVE_STEPS = 200, 100
KILL_AT = 60        # the step worker:1 is killed at

pytestmark = [pytest.mark.tf, pytest.mark.slow]


def test_pss_job_ends_at_max_steps_with_a_worker_killed_for_good(tmp_path):
    doc = job_spec("pss", tmp_path, MAX_STEPS, SAVE_STEPS, workers=2,
                   strategy="parameter_server", roles={"worker": {"minimum": 1}})
    doc["restart"]["worker"]["max_restarts"] = 0
    doc["timeouts"]["start"] = 180     # four TensorFlow imports on a loaded machine
    run = LaunchRun(write_spec(tmp_path, doc))
    assert run.wait_for_step(KILL_AT, timeout=240), run.stderr_text()[-3000:]
    kill = run.kill("worker:1")
    status = run.wait(timeout=300)
    stderr = run.stderr_text()
    assert status == 0, stderr[-4000:]
    # its loss named on the console, with the shard no one reads from then on
    assert ("tfcluster: worker:1 was killed by SIGKILL; restart budget spent (0 of 0 restarts "
            "of worker:1 used); going on with 1 of 2 workers (roles.worker.minimum 1); shard 1 "
            "of 2 of the training data (its TFCLUSTER_SHARD_INDEX) is read by no one now") \
        in stderr, stderr[-3000:]
    assert ("tfcluster:   worker:1 at " in stderr and "shard 1 of 2 unread from then on"
            in stderr), stderr[-3000:]     # the closing lines
    # the verdict: one worker fewer
    assert ("tfcluster: job succeeded after" in stderr and
            "training finished with 1 worker fewer (worker:1 lost for good) and every other "
            "task ended" in stderr), stderr[-3000:]
    # training went on after the kill, to max_steps, read whole by TensorFlow
    assert run.top_step() >= MAX_STEPS and run.top_step() > kill.step_before
    name, step, error = newest_checkpoint(tmp_path / "model", PY_TF221)
    assert error is None and step is not None and step >= MAX_STEPS, (name, step, error)
    summary = json.loads((run_dir(tmp_path) / "summary.json").read_text())
    assert [(lost["task"], lost["shard"], lost["returned_at"]) for lost in summary["lost"]] \
        == [("worker:1", [1, 2], None)]
    assert {row["task"]: row["restarts"] for row in summary["tasks"]} == \
        {"ps:0": 0, "chief:0": 0, "worker:0": 0, "worker:1": 0}
    assert not run.leftovers(), "processes left behind"
