"""launcher.run() and launcher.dry_run(): the same plan, the same clear errors as `launch`,
and a real Estimator job run from Python."""

from __future__ import annotations

import json
import os
import re
import sys

import pytest
from support import PY_TF215, REPO

import launcher
from launcher.errors import PreflightError, SpecError, UsageError

SPEC = {"name": "api", "cluster": {"chief": 1, "ps": 1}, "model_dir": "m", "max_steps": 10,
        "command": [sys.executable, "-c", "pass"]}


def test_dry_run_takes_a_path_a_dict_or_a_spec_and_overrides(tmp_path):
    from launcher.api import parse_spec

    path = tmp_path / "s.json"
    path.write_text(json.dumps(SPEC))
    for spec in (str(path), path, SPEC, parse_spec(json.dumps(SPEC))):
        doc = json.loads(launcher.dry_run(spec, as_json=True, max_steps=77))
        assert doc["max_steps"] == 77 and [t["type"] for t in doc["tasks"]] == ["ps", "chief"]
    text = launcher.dry_run(SPEC, ["python", "t.py", "--i=$(TFCLUSTER_TASK_INDEX)"])
    assert "  command: python t.py --i=0" in text


@pytest.mark.parametrize("call, error, message", [
    (lambda t: launcher.run({**SPEC, "cluster": {"chief": 2}}), SpecError,
     "cluster.chief: at most one chief task, got 2"),
    (lambda t: launcher.run(SPEC, max_step=5), SpecError, "max_step: unknown key"),
    (lambda t: launcher.run(SPEC, ["no-such-trainer"], run_dir=str(t / "r")), PreflightError,
     "ps:0, chief:0: program no-such-trainer not found on PATH ("),
    (lambda t: launcher.run(SPEC, model_dir="gs://b/m", run_dir=str(t / "r")), PreflightError,
     "model_dir gs://b/m: the fsspec driver for gs:// is not installed for the launcher: "
     "pip install gcsfs"),
    (lambda t: launcher.run(str(t / "missing.json")), SpecError, "spec file not found: "),
    (lambda t: launcher.run(42), UsageError, "spec must be a path, a dict or a Spec, got int"),
    (lambda t: launcher.run(SPEC, "python t.py"), UsageError,
     "command must be a non-empty list of strings"),
])
def test_bad_input_raises_the_clis_error_and_starts_nothing(tmp_path, monkeypatch, call,
                                                           error, message):
    monkeypatch.chdir(tmp_path)
    with pytest.raises(error) as e:
        call(tmp_path)
    assert message in str(e.value)
    assert not (tmp_path / "m").exists()                  # model_dir untouched
    for state in (tmp_path / "r").glob("*/state.json"):   # a refused run, as the registry
        assert json.loads(state.read_text())["state"] == "failed"    # records it


@pytest.mark.tf
def test_run_the_estimator_example_from_python(tmp_path, monkeypatch, capsys):
    """In this process, off a terminal: status 0 and the rows; the console stays short
    (at most 60 lines) while the logs keep every line. The example's spec as a dict, with
    a chief and the evaluator (whose evaluations are shown) only: no worker, no ps
    (tests/examples runs the whole example through `launch`)."""
    monkeypatch.chdir(REPO)
    spec = json.loads((REPO / "cluster_specs" / "estimator.json").read_text())
    spec["cluster"] = {"chief": ["localhost"]}
    result = launcher.run(spec, [PY_TF215, "examples/estimator/train.py"],
                          run_dir=str(tmp_path / "run"), model_dir=str(tmp_path / "model"),
                          epochs=1)
    out, err = capsys.readouterr()
    assert result.status == 0 and result.ok, err[-3000:]
    assert result.reason == "training finished and every task ended"
    plan = json.loads((tmp_path / "run" / "plan.json").read_text())
    assert plan["max_steps"] < 602                        # epochs=1 overrode the spec's 3
    assert result.final_step >= plan["max_steps"]         # the newest complete checkpoint
    rows = {r["task"]: (r["exit"], r["stopped"]) for r in result.tasks}
    assert rows == {"chief:0": (0, False), "evaluator:0": (0, False)}
    assert result.run_dir == str(tmp_path / "run")
    assert json.loads((tmp_path / "run" / "summary.json").read_text())["status"] == 0

    console = out.splitlines() + err.splitlines()
    assert len(console) <= 60, "\n".join(console)
    logs = [line for p in sorted((tmp_path / "run" / "logs").glob("*.log"))
            for line in p.read_bytes().decode(errors="replace").split("\n")[:-1]]
    hidden = int(re.search(r"(\d+) lines of TensorFlow's routine output", err)[1])
    shown = [line for line in out.splitlines() if line.startswith("[")]
    assert hidden + len(shown) == len(logs)             # every line is in the logs
    assert sum("Instructions for updating:" in line for line in logs) > 20
    assert not any("Instructions for updating" in line for line in console)
    assert any(f"Saving dict for global step {result.final_step}" in line for line in shown)
    assert os.environ.get("TF_CONFIG") is None           # the caller's process is untouched


def test_a_held_model_dir_raises_and_force_takes_it(tmp_path, monkeypatch, capsys):
    """A live run on another host holds model_dir: run() raises LeaseError (a UsageError)
    and starts nothing; force=True takes the lease with a warning and runs."""
    import time

    from launcher.records.lease import LEASE_FILE, LeaseError

    monkeypatch.chdir(tmp_path)
    (tmp_path / "m").mkdir()
    lease = tmp_path / "m" / LEASE_FILE
    lease.write_text(json.dumps({"run_id": "elsewhere-1", "host": "node-7.invalid", "pid": 1,
                                 "started": time.time(), "heartbeat": time.time()}))
    spec = {**SPEC, "check_storage": False}
    with pytest.raises(LeaseError, match=r"^model_dir m is in use by run elsewhere-1 \(host "
                                         r"node-7.invalid, launcher pid 1, heartbeat"):
        launcher.run(spec, run_dir=str(tmp_path / "r"), quiet=True)
    assert not (tmp_path / "r").exists()
    result = launcher.run(spec, run_dir=str(tmp_path / "r"), quiet=True, force=True)
    assert "--force: model_dir lease taken from run elsewhere-1 (host node-7.invalid" in \
        capsys.readouterr().err
    assert result.run_id and not lease.exists()        # taken, then released at the end
