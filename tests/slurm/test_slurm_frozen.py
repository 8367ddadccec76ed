"""A frozen ps on the real Slurm cluster: its job step's task (a process under slurmstepd
here) gets SIGSTOP mid-training. The launcher asks every task's TF server over gRPC at its
node's address, names the ps after ``timeouts.unresponsive``, kills its step and, under the
default restart policy of a ps, restarts the whole cluster from the newest checkpoint; the
job then finishes. The same scenario on the local backend: tests/faults/test_frozen_tasks.py."""

from __future__ import annotations

import contextlib
import os
import re
import signal

import pytest
from faults.harness import JOBS, LaunchRun, detected_in, newest_checkpoint, resumed_after
from support import PY_TF215, events, run_dir
from test_slurm_backend import released, write_spec

MAX_STEPS, UNRESPONSIVE = 300, 5
PROBE_PERIOD = 2    # launcher.liveness.PROBE_PERIOD

pytestmark = [pytest.mark.tf, pytest.mark.slow]


def test_frozen_ps_step_is_named_killed_and_the_cluster_restarts(tmp_path, slurm_env,
                                                                  slurm_cluster):
    spec = write_spec(tmp_path, name="slurm-frozen", evaluator=None, max_steps=MAX_STEPS,
                      command=[PY_TF215, str(JOBS / "estimator_job.py")],
                      run_dir=str(tmp_path / "runs"),
                      env={"FAULT_SAVE_STEPS": "50", "FAULT_STEP_SLEEP": "0.05",
                           "FAULT_PRINT_EVERY": "10"},
                      timeouts={"finish": 5, "kill": 3, "unresponsive": UNRESPONSIVE})
    run = LaunchRun(spec)
    frozen = None
    try:
        assert run.wait_for_step(120, timeout=240), run.stderr_text()[-3000:]
        frozen = run.freeze("ps:0", parent="slurmstepd")   # the task, not its srun
        status = run.wait(timeout=300)
    finally:
        if frozen is not None:     # a SIGKILLed task is gone; a stopped one must not stay
            with contextlib.suppress(ProcessLookupError):
                os.killpg(frozen.pid, signal.SIGCONT)
        if run.proc.poll() is None:
            run.wait(timeout=0)
    stderr = run.stderr_text()
    assert status == 0, stderr[-4000:]
    assert re.search(rf"ps:0 \(127\.0\.0\.1:\d+\) has not answered TensorFlow's gRPC for "
                     rf"{UNRESPONSIVE} s; restarting the whole cluster from the newest "
                     rf"checkpoint", stderr), stderr[-3000:]
    # named within unresponsive + one probe period (its last answer came before the freeze)
    reacted = detected_in(run_dir(tmp_path), frozen)
    assert reacted is not None and reacted <= UNRESPONSIVE + PROBE_PERIOD + 0.5, reacted
    assert resumed_after([run], frozen) is not None
    name, step, error = newest_checkpoint(tmp_path / "model", PY_TF215)
    assert error is None and step >= MAX_STEPS, (name, step, error)
    lost = [e for e in events(tmp_path) if e["event"] == "task_unresponsive"]
    assert [e["task"] for e in lost] == ["ps:0"]
    stopping = [e for e in events(tmp_path) if e["event"] == "stopping"]
    assert stopping[0]["tasks"] == ["ps:0"] and stopping[0]["signal"] == "SIGKILL"
    assert released(slurm_cluster)
    assert not run.leftovers(), "processes left behind"
