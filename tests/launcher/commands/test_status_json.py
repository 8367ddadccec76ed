"""`launch status RUN --json` (launcher/commands/status_document.py): one JSON document that
cluster_specs/status.schema.json describes, for a run that runs, one that ended, and bad
use (one line on stderr, exit 2, nothing on stdout)."""

from __future__ import annotations

import json
from pathlib import Path

import jsonschema
import pytest

from launcher.cli import main
from launcher.output.progress import OutputProgress, progress_fields
from launcher.records.registry import RunState, write_json_atomic
from orchestrator.coordinator import Progress
from orchestrator.decisions import TaskState

SCHEMA = json.loads((Path(__file__).resolve().parents[3] / "cluster_specs" /
                     "status.schema.json").read_text())
VALIDATOR = jsonschema.Draft202012Validator(SCHEMA)


def tasks(running: bool) -> list[TaskState]:
    return [TaskState("chief:0", "chief", running=running, status=None if running else 0,
                      address="localhost:2222", gpus=["0"], log="/r/logs/chief-0.log"),
            TaskState("ps:0", "ps", running=running, status=None if running else -15,
                      stopped=not running, restarts=1, address="localhost:2223",
                      log="/r/logs/ps-0.log")]


def status_json(capsys, run: str, *more: str) -> tuple[int, dict]:
    code = main(["status", run, "--json", *more])
    out = capsys.readouterr().out
    doc = json.loads(out)
    VALIDATOR.validate(doc)
    return code, doc


def new_run(tmp_path, running: bool) -> RunState:
    run_dir = tmp_path / "runs" / "job-1"
    run_dir.mkdir(parents=True)
    state = RunState(str(run_dir), "job-1", "job", "local", max_steps=400)
    state.attach(lambda: tasks(running))
    state.update(state="running", lease={"file": str(tmp_path / "m" / ".tfcluster-lease"),
                                         "held": True, "since": 1.0, "heartbeat": 2.0,
                                         "lost_to": None})
    state.on_event("checkpoint", {"step": 200, "name": "model.ckpt-200"})
    state.record_progress({"step": 200, "latest_step": 240, "step_source": "model_dir",
                           "rate": 20.0, "eta": 8.0,
                           "evaluation": {"step": 200, "metrics": {"loss": 0.5,
                                                                   "accuracy": 0.75}},
                           "evaluated_step": 200})
    return state


def test_a_running_run_is_one_document_the_schema_describes(tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("TFCLUSTER_RUNS", str(tmp_path / "runs"))
    new_run(tmp_path, running=True)
    code, doc = status_json(capsys, "job-1")
    assert code == 0
    assert (doc["run_id"], doc["state"], doc["verdict"]) == ("job-1", "running", None)
    assert (doc["step"], doc["latest_step"], doc["max_steps"]) == (200, 240, 400)
    assert doc["rate"] == 20.0 and 0 <= doc["eta"] <= 8.0
    assert doc["evaluation"] == {"step": 200, "metrics": {"loss": 0.5, "accuracy": 0.75}}
    assert doc["lease"]["held"] is True and doc["preemption"] is None
    assert [(t["task"], t["state"], t["exit"], t["restarts"], t["gpus"])
            for t in doc["tasks"]] == [("chief:0", "running", None, 0, ["0"]),
                                       ("ps:0", "running", None, 1, None)]


def test_an_ended_run_has_its_verdict_and_no_rate(tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("TFCLUSTER_RUNS", str(tmp_path / "runs"))
    state = new_run(tmp_path, running=False)
    write_json_atomic(str(Path(state.run_dir) / "summary.json"), {
        "status": 0, "reason": "training finished and every task ended",
        "training": "finished", "evaluation": "evaluated", "evaluated_step": 400,
        "notes": ["a note"], "preemption": {"step_reached": 410, "step_saved": 400,
                                             "steps_lost": 10}})
    state.finish(0, "training finished and every task ended", step=400)
    code, doc = status_json(capsys, str(state.run_dir))
    assert code == 0 and doc["state"] == "succeeded"
    assert doc["verdict"] == {"status": 0, "reason": "training finished and every task ended",
                              "training": "finished", "evaluation": "evaluated",
                              "known_failure": None, "cut_short": [], "notes": ["a note"]}
    assert doc["step"] == 400 and doc["rate"] is None and doc["eta"] is None
    assert doc["preemption"] == {"step_reached": 410, "step_saved": 400, "steps_lost": 10}
    assert [(t["task"], t["state"], t["exit"], t["stopped"]) for t in doc["tasks"]] == [
        ("chief:0", "0", 0, False), ("ps:0", "stopped (SIGTERM)", -15, True)]


def test_a_failed_run_exits_1_with_its_document(tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("TFCLUSTER_RUNS", str(tmp_path / "runs"))
    state = new_run(tmp_path, running=False)
    state.finish(1, "chief:0 failed")
    code, doc = status_json(capsys, "job-1")
    assert code == 1 and doc["state"] == "failed"
    assert doc["verdict"]["status"] == 1 and doc["verdict"]["training"] is None


@pytest.mark.parametrize("argv, says", [
    (["status", "no-such-run", "--json"], "no run 'no-such-run' under"),
    (["status", "job-1", "--json", "--all"], "--all goes without --json"),
])
def test_bad_use_is_one_line_on_stderr_exit_2_and_nothing_on_stdout(tmp_path, capsys,
                                                                     monkeypatch, argv, says):
    monkeypatch.setenv("TFCLUSTER_RUNS", str(tmp_path / "runs"))
    new_run(tmp_path, running=True)
    assert main(argv) == 2
    out, err = capsys.readouterr()
    assert out == ""
    assert len(err.splitlines()) == 1 and says in err, err


def test_the_schema_is_valid_and_names_every_field_the_document_has(tmp_path, capsys,
                                                                    monkeypatch):
    jsonschema.Draft202012Validator.check_schema(SCHEMA)
    monkeypatch.setenv("TFCLUSTER_RUNS", str(tmp_path / "runs"))
    new_run(tmp_path, running=True)
    _, doc = status_json(capsys, "job-1")
    assert set(doc) == set(SCHEMA["required"]) == set(SCHEMA["properties"])


def test_the_progress_recorded_is_the_freshest_a_trainers_output_ahead_of_model_dir():
    """Keras writes its step once per epoch, MWMS Estimators only their first and last
    checkpoints: the trainers' own output is then ahead, and the document says so."""
    p = Progress(max_steps=400, events_step=100, steps_per_sec=2.0)
    assert progress_fields(p)["latest_step"] == 100
    ahead = progress_fields(p, OutputProgress(300, "chief:0", 1.0, rate=10.0))
    assert (ahead["latest_step"], ahead["step_source"], ahead["rate"], ahead["eta"]) == \
        (300, "chief:0's output", 10.0, 10.0)
    behind = progress_fields(p, OutputProgress(50, "chief:0", 1.0))
    assert (behind["latest_step"], behind["step_source"]) == (100, "model_dir")


def test_status_json_list_and_status_give_the_freshest_step_with_its_source_and_age(
        tmp_path, capsys, monkeypatch):
    """The issue's detached stock job: its chief's output showed step 20335 while the only
    checkpoint was step 0. status --json keeps both apart, with the freshest step's source
    and age; `launch list` and `launch status` show the freshest, not the checkpoint's."""
    monkeypatch.setenv("TFCLUSTER_RUNS", str(tmp_path / "runs"))
    run_dir = tmp_path / "runs" / "job-1"
    run_dir.mkdir(parents=True)
    state = RunState(str(run_dir), "job-1", "stock", "local", max_steps=893)
    state.attach(lambda: tasks(True))
    state.update(state="running")
    state.on_event("checkpoint", {"step": 0, "name": "model.ckpt-0"})
    p = Progress(max_steps=893, events_step=0, step_at=10.0)
    fields = progress_fields(p, OutputProgress(20335, "chief:0", 2.0, rate=414.0), now=11.0)
    assert (fields["latest_step"], fields["step_source"], fields["step_age"]) == \
        (20335, "chief:0's output", 2.0)
    assert progress_fields(p, None, now=13.5)["step_age"] == 3.5   # model_dir's own
    state.record_progress(fields)
    _, doc = status_json(capsys, "job-1")
    assert (doc["step"], doc["latest_step"], doc["step_source"]) == \
        (0, 20335, "chief:0's output")
    assert doc["step_age"] is not None and 2.0 <= doc["step_age"] < 60
    assert main(["list"]) == 0
    listed = [line for line in capsys.readouterr().out.splitlines() if "job-1" in line]
    assert len(listed) == 1 and "20335/893" in listed[0], listed
    main(["status", "job-1"])
    out = capsys.readouterr().out
    assert "step 20335/893 (chief:0's output " in out and "checkpoint at step 0)" in out, out


def test_a_cancelled_runs_closing_line_says_cancelled_not_preempted():
    from launcher.output.summary import closing_line

    record = {"step_reached": 707, "step_saved": 707, "steps_lost": 0}
    assert closing_line(record, 143).startswith("cancelled at step 707: checkpoint at step "
                                                "707 in model_dir (0 steps lost)")
    assert closing_line(record, 75).startswith("preempted at step 707")
    assert closing_line(record).startswith("preempted at step 707")
