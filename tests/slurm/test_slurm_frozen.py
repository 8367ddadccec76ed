"""A frozen ps on the real Slurm cluster: its task (a process under its node step's agent)
gets SIGSTOP mid-training. The launcher asks every task's TF server over gRPC at its
node's address, names the ps after ``timeouts.unresponsive``, kills it and, under the
default restart policy of a ps, restarts the whole cluster from the newest checkpoint; the
job then finishes. The cluster is a chief (node n1) and the ps (n2, alone in its node step):
the rule looks at the ps and at a trainer of the restarted cluster, and one checkpoint before
the freeze is all it needs. The same scenario on the local backend: tests/faults/test_kills.py."""

from __future__ import annotations

import contextlib
import os
import signal

import pytest
from faults.harness import JOBS, LaunchRun, check_ps_recovered
from support import PY_TF215, run_dir
from test_slurm_backend import released, write_spec

MAX_STEPS, UNRESPONSIVE = 200, 5
SAVE_STEPS = 50
PROBE_PERIOD = 2    # launcher.monitors.liveness.PROBE_PERIOD

pytestmark = [pytest.mark.tf, pytest.mark.slow]


def test_frozen_ps_step_is_named_killed_and_the_cluster_restarts(tmp_path, slurm_env,
                                                                  slurm_cluster):
    spec = write_spec(tmp_path, name="slurm-frozen", evaluator=None, max_steps=MAX_STEPS,
                      cluster={"chief": ["a"], "ps": ["b"]},
                      command=[PY_TF215, str(JOBS / "estimator_job.py")],
                      run_dir=str(tmp_path / "runs"),
                      env={"FAULT_SAVE_STEPS": str(SAVE_STEPS), "FAULT_STEP_SLEEP": "0.05",
                           "FAULT_PRINT_EVERY": "10"},
                      timeouts={"finish": 5, "kill": 3, "unresponsive": UNRESPONSIVE})
    run = LaunchRun(spec)
    frozen = None
    try:
        # a checkpoint saved (at SAVE_STEPS) and training going on
        assert run.wait_for_step(SAVE_STEPS + 10, timeout=240), run.stderr_text()[-3000:]
        frozen = run.freeze("ps:0")     # the task, under its node step's agent
        status = run.wait(timeout=300)
    finally:
        if frozen is not None:     # a SIGKILLed task is gone; a stopped one must not stay
            with contextlib.suppress(ProcessLookupError):
                os.killpg(frozen.pid, signal.SIGCONT)
        if run.proc.poll() is None:
            run.wait(timeout=0)
    stderr = run.stderr_text()
    assert status == 0, stderr[-4000:]
    check_ps_recovered(run, frozen, run_dir(tmp_path), tmp_path / "model", r"127\.0\.0\.1",
                       UNRESPONSIVE, MAX_STEPS, PROBE_PERIOD)
    assert released(slurm_cluster)
    assert not run.leftovers(), "processes left behind"
