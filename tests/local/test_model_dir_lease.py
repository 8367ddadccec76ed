"""One live run per model_dir, with real launchers on the local backend: a second run is
refused while the first goes on, a third runs once the first ended, and the lease a
SIGKILLed launcher left is taken over (launcher/records/lease.py, docs/runs.md)."""

from __future__ import annotations

import json
import os
import re
import signal
import sys
from pathlib import Path

from support import cancelled_on_exit, detach, run_launch, state_of, tfcluster_tasks, wait_gone

from launcher.records.lease import LEASE_FILE

FAKE_TASK = str(Path(__file__).resolve().parent / "fake_task.py")


def fake_spec(tmp_path: Path, name: str, plan: dict) -> Path:
    spec = tmp_path / f"{name}.json"
    spec.write_text(json.dumps({
        "name": name, "cluster": {"chief": 1, "ps": 1}, "command": [sys.executable, FAKE_TASK],
        "model_dir": str(tmp_path / "model"), "max_steps": 10, "check_storage": False,
        "env": {"FAKE_PLAN": json.dumps(plan)}}))
    return spec


FOREVER = {"chief": "forever", "ps": "forever"}
QUICK = {"chief": "exit 0 after 0.2", "ps": "forever"}


def test_a_second_run_is_refused_while_the_first_goes_on_and_a_third_runs_after(tmp_path,
                                                                                runs):
    lease = tmp_path / "model" / LEASE_FILE
    with cancelled_on_exit(tmp_path, runs):
        first = detach(fake_spec(tmp_path, "first", FOREVER), runs)
        state = state_of(tmp_path, first)
        holder = json.loads(lease.read_text())
        assert (holder["run_id"], holder["pid"]) == (first, state["launcher"]["pid"])
        # dry-run and status show who holds it
        dry = run_launch(str(fake_spec(tmp_path, "second", QUICK)), "--dry-run", env=runs)
        assert f"# lease: held by run {first} (host " in dry.stdout
        status = run_launch("status", first, env=runs)
        assert re.search(rf"^lease: held, heartbeat \d+s ago \({re.escape(str(lease))}\)$",
                         status.stdout, re.M), status.stdout
        # the second run: one line naming the holder, exit 2, nothing started
        second = run_launch(str(fake_spec(tmp_path, "second", QUICK)), env=runs, timeout=60)
        assert second.returncode == 2, second.stdout + second.stderr
        assert second.stderr.strip().splitlines() == [
            f"launch: error: model_dir {tmp_path / 'model'} is in use by run {first} (host "
            f"{holder['host']}, launcher pid {holder['pid']}, heartbeat "
            + second.stderr.split(", heartbeat ")[1].strip()]
        assert f"follow it with `launch status {first}`" in second.stderr
        assert len(tfcluster_tasks()) == 2 and not list((tmp_path / "runs").glob("second*"))
        # so is a detached one, before it forks
        refused = run_launch(str(fake_spec(tmp_path, "second", QUICK)), "--detach", env=runs)
        assert refused.returncode == 2 and "is in use by run" in refused.stderr
        assert run_launch("cancel", first, env=runs).returncode == 0
    assert not lease.exists()
    status = run_launch("status", first, env=runs)
    assert f"lease: released ({lease})" in status.stdout
    third = run_launch(str(fake_spec(tmp_path, "third", QUICK)), env=runs, timeout=120)
    assert third.returncode == 0, third.stderr
    assert "lease" not in third.stderr and not lease.exists()


def test_the_lease_of_a_sigkilled_launcher_is_taken_over(tmp_path, runs):
    lease = tmp_path / "model" / LEASE_FILE
    with cancelled_on_exit(tmp_path, runs):
        first = detach(fake_spec(tmp_path, "first", FOREVER), runs)
        pid = state_of(tmp_path, first)["launcher"]["pid"]
        os.kill(pid, signal.SIGKILL)
        assert not wait_gone(timeout=15), "the watchdog did not end the tasks"
        assert json.loads(lease.read_text())["run_id"] == first       # left behind
        status = run_launch("status", first, env=runs)
        assert "lease: left in" in status.stdout and "takes it over" in status.stdout
        again = run_launch(str(fake_spec(tmp_path, "again", QUICK)), env=runs, timeout=120)
        assert again.returncode == 0, again.stderr
        host = json.loads((tmp_path / "runs" / first / "state.json").read_text())["launcher"]
        assert (f"tfcluster: model_dir lease taken over from run {first} (host {host['host']}, "
                f"launcher pid {pid}, ") in again.stderr
        assert f"its launcher (pid {pid} on {host['host']}) is gone" in again.stderr
    assert not lease.exists()
