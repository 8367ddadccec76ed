"""A console for many tasks (docs/console.md): above 16 tasks the closing table, `launch
status` and `--dry-run` group the tasks by role and name the outliers; small jobs keep one
row per task; every row stays in summary.json, `launch status --all` and `--dry-run --all`.
The jobs run on the scripted in-memory backend."""

from __future__ import annotations

import json

import pytest
from scripted_backend import Script, ScriptedBackend, run_job

import launcher
from launcher.commands.runs import task_table
from launcher.output.summary import summary_table, task_rows

pytestmark = pytest.mark.usefixtures("scripted_backend")

RESTART = {"worker": {"policy": "on-failure", "max_restarts": 2, "backoff": 1}}


def forty_workers(tmp_path):
    scripts = {"chief:0": [Script(exit_at=30)],
               **{f"worker:{i}": [Script(exit_at=20 + i % 3)] for i in range(40)},
               "worker:7": [Script(exit_at=2, status=-9),
                            Script(exit_at=10)],
               "worker:31": [Script(exit_at=28)]}
    return run_job({"cluster": {"chief": 1, "worker": 40, "ps": 2}, "restart": RESTART},
                   ScriptedBackend(scripts), tmp_path)


def test_closing_table_of_many_tasks_has_a_line_per_role_and_names_the_outliers(tmp_path):
    result, _ = forty_workers(tmp_path)
    assert result.status == 0
    lines = summary_table(task_rows(result.tasks), "RUN/summary.json").splitlines()
    roles = [line.split()[:2] for line in lines[1:4]]
    assert roles == [["ps", "2"], ["chief", "1"], ["worker", "40"]]
    worker = lines[3]
    assert "0 ×40" in worker and worker.rstrip().endswith("1")     # one restart
    named = {line.split()[0]: line for line in lines if line.startswith("worker:")}
    assert "restarted" in named["worker:7"]
    assert "slowest" in named["worker:31"] and "28.0s" in named["worker:31"]
    assert lines[-1] == "every task's row: RUN/summary.json"
    assert len(lines) < 15


def test_a_failed_task_is_named_among_many(tmp_path):
    scripts = {"chief:0": [Script(exit_at=30)],
               **{f"worker:{i}": [Script(exit_at=20)] for i in range(30)},
               "worker:12": [Script(exit_at=2, status=3, lines=["ValueError: bad input"])]}
    result, _ = run_job({"cluster": {"chief": 1, "worker": 30, "ps": 1}},
                        ScriptedBackend(scripts), tmp_path)
    assert result.status == 1
    table = summary_table(task_rows(result.tasks), "summary.json")
    failed = [line for line in table.splitlines() if " failed " in line]
    assert len(failed) == 1 and failed[0].startswith("worker:12") and " 3 " in failed[0]


def test_a_small_job_keeps_one_row_per_task(tmp_path):
    scripts = {"chief:0": [Script(exit_at=3)], "worker:0": [Script(exit_at=2)]}
    result, _ = run_job({"cluster": {"chief": 1, "worker": 1, "ps": 1}},
                        ScriptedBackend(scripts), tmp_path)
    lines = summary_table(task_rows(result.tasks)).splitlines()
    assert [line.split()[0] for line in lines] == ["task", "ps:0", "chief:0", "worker:0"]


def test_launch_status_groups_many_tasks_and_all_shows_every_row(tmp_path):
    rows = [{"task": f"worker:{i}", "address": f"h:{2000 + i}", "state": "running",
             "duration": 5.0, "restarts": 0, "log": f"logs/worker-{i}.log"} for i in range(50)]
    rows[9].update(state="killed (SIGKILL)", restarts=1)
    state = {"run_id": "r-1", "state": "succeeded", "tasks": rows}
    grouped = task_table(state, "/runs/r-1", every=False).splitlines()
    assert grouped[1].split()[:2] == ["worker", "50"]
    assert [line.split()[0] for line in grouped if line.startswith("worker:")] == ["worker:9"]
    assert grouped[-1] == "every task's row: launch status r-1 --all"
    assert len(task_table(state, "/runs/r-1", every=True).splitlines()) == 51


def test_dry_run_of_many_tasks_shows_one_task_per_role_and_every_address(tmp_path):
    doc = {"name": "big", "cluster": {"chief": 1, "worker": 40, "ps": 3},
           "command": ["train"], "model_dir": str(tmp_path / "m"), "max_steps": 10}
    short = launcher.dry_run(doc, every=False)
    assert short.count("TF_CONFIG=") == 3            # ps:0, chief:0, worker:0 in full
    addresses = short.split("# addresses\n")[1].splitlines()
    assert len(addresses) == 44 and addresses[-1].startswith("worker:39  localhost:")
    assert "--dry-run --all" in short
    assert launcher.dry_run(doc, every=True).count("TF_CONFIG=") == 44
    assert len(json.loads(launcher.dry_run(doc, as_json=True))["tasks"]) == 44
