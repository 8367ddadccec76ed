"""Detached runs with the docker backend on a real engine: `launch SPEC --detach` returns
while the launcher goes on as a daemon (with its reaper) and every task is a container;
`launch list`, `status`, `logs` and `cancel` follow it. Stand-in tasks
(tests/local/fake_task.py, bind-mounted into the image): the point is the daemon, the
containers and the teardown."""

from __future__ import annotations

import json
from pathlib import Path

import psutil
import pytest
from docker_support import docker_spec
from support import (
    REPO,
    cancelled_on_exit,
    check_cancelled,
    check_listed_running,
    check_succeeded,
    daemon_alive,
    detach,
    marked_processes,
    run_launch,
    state_of,
    tfcluster_tasks,
)
from test_docker_jobs import RUN_LABEL, wait_for

pytestmark = [pytest.mark.slow]
TESTS = str(REPO / "tests")
FAKE_TASK = str(REPO / "tests" / "local" / "fake_task.py")


def fake_spec(tmp_path: Path, plan: dict) -> Path:
    """Chief, worker and ps as containers running the stand-in task, the tests folder
    mounted read-only at the same path, model_dir in a shared folder."""
    shared = tmp_path / "shared"
    shared.mkdir()
    spec = docker_spec(str(shared / "model"), [f"{TESTS}:{TESTS}:ro", f"{shared}:{shared}"],
                       name="dk-detach", evaluator=None, max_steps=10, check_storage=False,
                       cluster={"chief": ["localhost"], "worker": ["localhost"],
                                "ps": ["localhost"]},
                       command=["python", FAKE_TASK], env={"FAKE_PLAN": json.dumps(plan)})
    path = tmp_path / "spec.json"
    path.write_text(json.dumps(spec))
    return path


def reapers(run_id: str) -> list[psutil.Process]:
    """The run's reaper (`python -m launcher.backends.docker_reaper --reap DOCKER RUN_ID`)."""
    out = []
    for proc in marked_processes():
        try:
            argv = proc.cmdline()
        except psutil.Error:
            continue
        if "--reap" in argv and argv[-1] == run_id:
            out.append(proc)
    return out


def task_containers(run_id: str) -> set[str]:
    return {f"tfc-{run_id}-{t}" for t in ("chief-0", "worker-0", "ps-0")}


def test_detached_docker_run_reports_running_then_succeeds(engine, image, tmp_path, runs):
    spec = fake_spec(tmp_path, {"chief": "exit 0 after 8", "worker": "exit 0 after 6",
                                "ps": "forever"})
    with cancelled_on_exit(tmp_path, runs):
        run_id = detach(spec, runs)
        state = state_of(tmp_path, run_id)
        assert state["backend"] == "docker" and state["detached"] and daemon_alive(state)
        mine = f"{RUN_LABEL}={run_id}"
        assert wait_for(lambda: set(engine.containers(label=mine)) == task_containers(run_id),
                        20), engine.containers(label=mine)
        lines = check_listed_running(run_id, "dk-detach", "docker", runs)
        rows = {line.split()[0]: line.split() for line in lines}
        assert all(rows[t][2] == "running" for t in ("chief:0", "worker:0", "ps:0")), rows
        # the chief's container ends by itself: the run ends, the ps is stopped, the daemon
        # and its reaper exit, and no container of the run is left
        state = wait_for(lambda: (s := state_of(tmp_path, run_id))["state"] not in
                         ("starting", "running") and s, 90)
        assert state and state["state"] == "succeeded", state
        assert wait_for(lambda: not daemon_alive(state), 30), "the daemon outlived its run"
        assert engine.containers(label=mine) == []
        assert reapers(run_id) == []
        check_succeeded(run_id, state, runs)


def test_cancel_of_a_detached_docker_run_leaves_no_container(engine, image, tmp_path, runs):
    spec = fake_spec(tmp_path, {"chief": "forever", "worker": "spawn-forever",
                                "ps": "forever"})
    with cancelled_on_exit(tmp_path, runs):
        run_id = detach(spec, runs)
        mine = f"{RUN_LABEL}={run_id}"
        assert wait_for(lambda: set(engine.containers(label=mine)) == task_containers(run_id),
                        20), engine.containers(label=mine)
        status = run_launch("status", run_id, env=runs)
        assert status.returncode == 0 and "state running" in status.stdout, status.stdout
        daemon = state_of(tmp_path, run_id)
        assert daemon_alive(daemon) and len(reapers(run_id)) == 1
        done = run_launch("cancel", run_id, env=runs, timeout=180)
        assert done.returncode == 0, done.stderr
        assert f"cancelled run {run_id}" in done.stdout
        # cancel returns once the run is over: no container, no docker client, no daemon,
        # no reaper is left
        assert engine.containers(label=mine) == [], "cancel returned with containers left"
        assert tfcluster_tasks() == []
        assert not daemon_alive(daemon)
        assert reapers(run_id) == []
        check_cancelled(tmp_path, run_id, runs, ["chief:0", "worker:0"])
