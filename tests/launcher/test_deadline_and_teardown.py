"""The whole-job deadline (``timeouts.job``) and the order of the teardown, on the real job
loop over the scripted backend and a fake clock."""

from __future__ import annotations

import json
import signal

import pytest
from scripted_backend import Script, ScriptedBackend, run_job

from launcher.monitors.deadline import DeadlineMonitor, deadline_monitor
from launcher.spec import Timeouts

CLUSTER = {"chief": 1, "worker": 1, "ps": 1}


pytestmark = pytest.mark.usefixtures("scripted_backend")


def stopping_events(tmp_path) -> list[list[str]]:
    lines = (tmp_path / "run" / "events.jsonl").read_text().splitlines()
    return [e["tasks"] for e in map(json.loads, lines) if e["event"] == "stopping"]


def test_the_deadline_ends_the_job_with_its_reason_and_stops_the_ps_last(tmp_path):
    backend = ScriptedBackend({})          # every task runs until it is stopped
    deadline = DeadlineMonitor(30, backend.clock)
    result, out = run_job({"cluster": CLUSTER, "evaluator": "localhost",
                           "timeouts": {"job": 30, "kill": 3}}, backend, tmp_path,
                          monitors=[deadline])
    assert result.status == 1
    assert result.reason == ("the job's deadline passed (timeouts.job = 30s): every task is "
                             "stopped")
    assert 30 <= result.duration < 30.2
    assert all(r.stopped and r.status == -signal.SIGTERM for r in result.tasks)
    # trainers and the evaluator first, the ps once they are gone
    assert stopping_events(tmp_path) == [["chief:0", "worker:0", "evaluator:0"], ["ps:0"]]


def test_the_ps_waits_for_a_trainer_that_ignores_sigterm(tmp_path):
    backend = ScriptedBackend({"worker:0": [Script(ignores_term=True)]})
    result, _ = run_job({"cluster": CLUSTER, "timeouts": {"kill": 3}}, backend, tmp_path,
                        monitors=[DeadlineMonitor(10, backend.clock)])
    worker, ps = backend.handles["worker:0"][0], backend.handles["ps:0"][0]
    assert worker.signals == [signal.SIGTERM, signal.SIGKILL]
    assert ps.signals == [signal.SIGTERM]
    assert 13 <= result.duration < 13.2      # the kill window, then the ps


def test_no_deadline_unless_the_spec_sets_one():
    assert deadline_monitor(Timeouts(job=0.0)) == []
    (monitor,) = deadline_monitor(Timeouts(job=5))
    assert monitor.seconds == 5


def test_a_restarted_task_is_told_its_restart_count(tmp_path):
    backend = ScriptedBackend({"worker:0": [Script(exit_at=1, status=1), Script(exit_at=1,
                               status=1), Script()], "chief:0": [Script(exit_at=5)]})
    result, _ = run_job({"cluster": CLUSTER, "timeouts": {"finish": 1, "kill": 1},
                         "restart": {"worker": {"policy": "always", "backoff": 0}}},
                        backend, tmp_path, base_env={"TFCLUSTER_RESTART_COUNT": "2"})
    counts = [h.task.env["TFCLUSTER_RESTART_COUNT"] for h in backend.handles["worker:0"]]
    assert counts == ["2", "3", "4"]      # two attempts before this one, then its restarts
    assert backend.handles["chief:0"][0].task.env["TFCLUSTER_RESTART_COUNT"] == "2"
    assert result.status == 0
