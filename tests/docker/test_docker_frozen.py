"""A frozen ps container on a real engine (``docker pause``: the cgroup freezer, every
process of the container stopped, its port still bound). On the host network the launcher
asks every task's TF server over gRPC at localhost, names the ps after
``timeouts.unresponsive``, kills its container and, under the default restart policy of a
ps, restarts the whole cluster from the newest checkpoint; the job then finishes and no
container is left. The same scenario on the local backend: tests/faults/test_frozen_tasks.py.
The cluster is a chief and the ps (no worker, no evaluator: the rule looks at the ps, and
at the restarted cluster training on, which the chief shows)."""

from __future__ import annotations

import json
import time

import pytest
from docker_support import docker_spec
from faults.harness import JOBS, Kill, LaunchRun, check_ps_recovered
from support import REPO, run_dir
from test_docker_jobs import RUN_LABEL, wait_for, write_spec

MAX_STEPS, UNRESPONSIVE = 150, 5
PAUSED_AT = 70     # after the checkpoint at step 50
PROBE_PERIOD = 2    # launcher.monitors.liveness.PROBE_PERIOD
TESTS = str(REPO / "tests")

pytestmark = [pytest.mark.tf, pytest.mark.slow]


def test_paused_ps_container_is_named_killed_and_the_cluster_restarts(engine, image,
                                                                        tmp_path):
    shared = tmp_path / "shared"
    shared.mkdir()
    model_dir = shared / "model"
    spec = write_spec(tmp_path, docker_spec(
        str(model_dir), [f"{TESTS}:{TESTS}:ro", f"{shared}:{shared}"], name="dk-frozen",
        cluster={"chief": ["localhost"], "ps": ["localhost"]},
        evaluator=None, max_steps=MAX_STEPS, run_dir=str(tmp_path / "runs"),
        command=["python", str(JOBS / "estimator_job.py")],
        env={"FAULT_SAVE_STEPS": "50", "FAULT_STEP_SLEEP": "0.05", "FAULT_PRINT_EVERY": "10"},
        timeouts={"finish": 5, "kill": 5, "unresponsive": UNRESPONSIVE}))
    run = LaunchRun(spec)
    ps = None
    try:
        assert run.wait_for_step(PAUSED_AT, timeout=300), run.stderr_text()[-3000:]
        run_id = json.loads((run_dir(tmp_path) / "plan.json").read_text())["run_id"]
        ps = f"tfc-{run_id}-ps-0"
        frozen = Kill("ps:0", time.monotonic(), run.top_step(), "docker pause")
        engine.docker("pause", ps)
        status = run.wait(timeout=300)
    finally:
        if ps is not None and ps in engine.containers():    # still paused: let it go
            engine.docker("unpause", ps, check=False)
        if run.proc.poll() is None:
            run.wait(timeout=0)
    stderr = run.stderr_text()
    assert status == 0, stderr[-4000:]
    check_ps_recovered(run, frozen, run_dir(tmp_path), model_dir, "localhost",
                       UNRESPONSIVE, MAX_STEPS, PROBE_PERIOD)
    wait_for(lambda: not engine.containers(label=f"{RUN_LABEL}={run_id}"), 10)
    assert not run.leftovers(), "processes left behind"
