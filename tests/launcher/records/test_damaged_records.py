"""Damaged run records (a truncated or foreign state.json, events.jsonl or summary.json)
never break `launch list`, `status` or `report`: the bad run is named in one line, the
others are listed."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from launcher import cli
from launcher.records.registry import RunState


def good_run(root: Path, run_id: str, started: float) -> Path:
    run_dir = root / run_id
    (run_dir / "logs").mkdir(parents=True)
    state = RunState(str(run_dir), run_id, "job", "local", max_steps=10)
    state.doc.update(started=started, launcher={}, state="succeeded", step=10, reason="done",
                     tasks=[{"task": "chief:0", "address": "localhost:1", "state": "0",
                             "exit": 0, "stopped": False, "restarts": 0, "pid": None,
                             "duration": 1.5, "since": None, "log": "logs/chief-0.log"}])
    state.update()
    (run_dir / "plan.json").write_text(json.dumps({"run_id": run_id, "name": "job",
                                                   "model_dir": str(root / "model"),
                                                   "max_steps": 10}))
    return run_dir


DAMAGED = {
    "truncated": ('{"version": 1, "run_id": "trunc', "is damaged: not JSON, or cut short "
                  "(Unterminated string starting at: line 1 column 26 (char 25))"),
    "foreign": ('{"hello": "world"}', "is damaged: no version: not a state file of tfcluster"),
    "a-list": ("[1, 2, 3]", "is damaged: the state is a list, not an object"),
    "bad-tasks": (json.dumps({"version": 1, "run_id": "x", "name": "n", "backend": "local",
                              "state": "running", "tasks": [{"task": "chief:0"}]}),
                  "is damaged: tasks[0].address is missing"),
    "bad-started": (json.dumps({"version": 1, "run_id": "x", "name": "n", "backend": "local",
                                "state": "failed", "started": "yesterday"}),
                    "is damaged: started is a string"),
    "bad-launcher": (json.dumps({"version": 1, "run_id": "x", "name": "n", "backend": "local",
                                 "state": "running", "launcher": {"pid": "12"}}),
                     "is damaged: launcher.pid is a string"),
}


@pytest.fixture
def root(tmp_path, monkeypatch) -> Path:
    root = tmp_path / "runs"
    good_run(root, "good-1", 1000.0)
    good_run(root, "good-2", 2000.0)
    for name, (text, _) in DAMAGED.items():
        (root / name).mkdir()
        (root / name / "state.json").write_text(text)
    monkeypatch.setenv("TFCLUSTER_RUNS", str(root))
    return root


def test_list_names_each_damaged_run_in_one_line_and_lists_the_others(root, capsys):
    assert cli.main(["list"]) == 0
    out, err = capsys.readouterr()
    rows = [line.split() for line in out.splitlines()[1:]]
    assert [r[0] for r in rows[:2]] == ["good-2", "good-1"]       # newest first
    assert rows[0][1:4] == ["job", "local", "succeeded"]
    assert sorted(r[0] for r in rows[2:]) == sorted(DAMAGED)
    assert all(r[3] == "damaged" for r in rows[2:])
    assert sorted(err.splitlines()) == sorted(
        f"launch list: {root / name / 'state.json'} {why}" for name, (_, why) in DAMAGED.items())


@pytest.mark.parametrize("name", sorted(DAMAGED))
def test_status_of_a_damaged_run_is_one_line(root, capsys, name):
    assert cli.main(["status", name]) == 2
    out, err = capsys.readouterr()
    assert out == "" and err.splitlines() == [
        f"launch: error: {root / name / 'state.json'} {DAMAGED[name][1]}"]


def test_a_run_whose_events_and_summary_are_cut_short_still_shows(root, capsys):
    run_dir = root / "good-1"
    (run_dir / "events.jsonl").write_text('{"time": 1, "event": "job_started"}\n{"ti')
    (run_dir / "summary.json").write_text('{"status": 0, "tasks": [')
    assert cli.main(["status", "good-1"]) == 0
    out, _ = capsys.readouterr()
    assert "state succeeded" in out and "chief:0" in out
    assert cli.main(["logs", "good-1"]) == 0
    assert cli.main(["report", str(run_dir)]) == 0
    _, err = capsys.readouterr()
    assert err.splitlines() == [
        f"launch report: {run_dir / 'summary.json'} is damaged (not JSON, or cut short "
        "(Expecting value: line 1 column 25 (char 24))); the report has no task table"]
    assert (run_dir / "report.html").exists()


@pytest.mark.parametrize("summary", ['["not", "a", "summary"]',
                                     '{"tasks": "chief", "duration": 1}',
                                     '{"tasks": [{"duration": "long"}]}'])
def test_report_leaves_out_a_foreign_summary(root, capsys, summary):
    run_dir = root / "good-2"
    (run_dir / "summary.json").write_text(summary)
    assert cli.main(["report", str(run_dir)]) == 0
    _, err = capsys.readouterr()
    assert len(err.splitlines()) == 1 and "summary.json is damaged" in err


@pytest.mark.parametrize("plan", ['{"run_id": "x", "mod', '[1]', '{"model_dir": 7}'])
def test_report_of_a_damaged_plan_is_one_line(root, capsys, plan):
    run_dir = root / "good-2"
    (run_dir / "plan.json").write_text(plan)
    assert cli.main(["report", str(run_dir)]) == 2
    _, err = capsys.readouterr()
    assert len(err.splitlines()) == 1
    assert err.startswith(f"launch: error: {run_dir / 'plan.json'} is damaged: ")
