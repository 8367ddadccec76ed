"""Detached runs with the ssh backend on real hosts: `launch SPEC --detach` returns while the
launcher goes on as a daemon on this machine and drives the tasks on the hosts; `launch
list`, `status`, `logs` and `cancel` follow it from its run directory. Stand-in tasks
(tests/local/fake_task.py): the point is the daemon, the hosts and the teardown."""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

from ssh_specs import write_spec
from support import (
    REPO,
    cancelled_on_exit,
    check_cancelled,
    check_listed_running,
    check_succeeded,
    daemon_alive,
    detach,
    local_ssh_processes,
    run_launch,
    state_of,
    wait_state,
)
from test_ssh_jobs import tasks_by_host

FAKE_TASK = str(REPO / "tests" / "local" / "fake_task.py")


def fake_spec(tmp_path: Path, bed, cluster: dict, plan: dict) -> Path:
    """Stand-in tasks on the hosts; no run_dir in the spec: the run goes under the run
    root, as a user's does."""
    spec = write_spec(tmp_path, bed, cluster, command=[sys.executable, FAKE_TASK],
                      max_steps=10, check_storage=False, env={"FAKE_PLAN": json.dumps(plan)})
    doc = json.loads(spec.read_text())
    del doc["run_dir"]
    spec.write_text(json.dumps(doc, indent=2))
    return spec


def wait_tasks(bed, expected: dict[str, set[str]], timeout: float = 15) -> dict:
    """Which task runs on which host, once ``expected`` is seen (the daemon reports a task
    started once its description went to its host; the host execs it a moment later)."""
    deadline = time.monotonic() + timeout
    while (seen := tasks_by_host(bed)) != expected and time.monotonic() < deadline:
        time.sleep(0.1)
    return seen


def test_detached_ssh_run_reports_running_then_succeeds(hosts, tmp_path, runs):
    spec = fake_spec(tmp_path, hosts, {"chief": ["h1"], "worker": ["h2"], "ps": ["h3"]},
                     {"chief": "exit 0 after 8", "worker": "exit 0 after 6", "ps": "forever"})
    with cancelled_on_exit(tmp_path, runs):
        run_id = detach(spec, runs)
        # the launch that detached has exited; its daemon drives the tasks on the hosts
        state = state_of(tmp_path, run_id)
        assert state["backend"] == "ssh" and state["detached"] and daemon_alive(state)
        expected = {"h1": {"chief:0"}, "h2": {"worker:0"}, "h3": {"ps:0"}}
        assert wait_tasks(hosts, expected) == expected
        lines = check_listed_running(run_id, "ssh-test", "ssh", runs)
        rows = {line.split()[0]: line for line in lines}
        for task, host in (("chief:0", 0), ("worker:0", 1), ("ps:0", 2)):
            assert rows[task].split()[1].startswith(hosts.hosts[host].address + ":"), rows
            assert rows[task].split()[2] == "running", rows
        # the chief ends by itself: the run ends, the ps is stopped, the daemon exits
        state = wait_state(tmp_path, run_id, ("succeeded", "failed", "cancelled", "lost"), 60)
        assert state["state"] == "succeeded", state
        deadline = time.monotonic() + 15
        while daemon_alive(state) and time.monotonic() < deadline:
            time.sleep(0.1)
        assert not daemon_alive(state), "the detached launcher outlived its run"
        check_succeeded(run_id, state, runs)
        logs = run_launch("logs", run_id, "ps", env=runs)
        assert "hello from ps:0" in logs.stdout, logs.stdout
        assert hosts.leftovers(timeout=5) == {}
        assert local_ssh_processes() == []


def test_cancel_of_a_detached_ssh_run_leaves_nothing_on_any_host(hosts, tmp_path, runs):
    """Two tasks on h3 (through its master connection), a worker whose child shares its
    process group: cancel ends all of them, ps last, and leaves no ssh here."""
    spec = fake_spec(tmp_path, hosts,
                     {"chief": ["h1"], "worker": ["h2", "h3"], "ps": ["h3"]},
                     {"chief": "forever", "worker": "spawn-forever", "ps": "forever"})
    with cancelled_on_exit(tmp_path, runs):
        run_id = detach(spec, runs)
        expected = {"h1": {"chief:0"}, "h2": {"worker:0"}, "h3": {"worker:1", "ps:0"}}
        assert wait_tasks(hosts, expected) == expected
        # the worker's child runs on its host too
        assert len(hosts.processes(hosts.hosts[1])) >= 3     # bootstrap, worker, its child
        status = run_launch("status", run_id, env=runs)
        assert status.returncode == 0 and "state running" in status.stdout, status.stdout
        daemon = state_of(tmp_path, run_id)
        assert daemon_alive(daemon)
        done = run_launch("cancel", run_id, env=runs, timeout=180)
        assert done.returncode == 0, done.stderr
        assert f"cancelled run {run_id}" in done.stdout
        # cancel returns once the run is over: nothing is left on any host, nor here
        assert hosts.leftovers(timeout=0) == {}, "cancel returned with tasks on the hosts"
        assert not daemon_alive(daemon)
        assert local_ssh_processes() == []
        check_cancelled(tmp_path, run_id, runs, ["chief:0", "worker:0", "worker:1"])
