"""Before training: the shared-storage probe (local disk and S3) and the check for a
model_dir that already holds the finished model."""

from __future__ import annotations

import json
import os
import stat
from pathlib import Path

import fsspec
import pytest
from coordinator.tf_writes import FakeTrainer
from support import PY_TF215, read_events, run_launch

from launcher.api import parse_spec
from launcher.backends.local import LocalBackend
from launcher.backends.storage_check import PROBE_PREFIX, already_trained, check_shared_storage
from launcher.errors import PreflightError
from launcher.output.console import Console
from launcher.output.progress import progress_line
from launcher.plan import build_plan
from launcher.records.events import EventLog
from orchestrator.coordinator import Progress

SLEEP = ["-c", "import time; time.sleep(30)"]


def make(spec_doc: dict):
    spec = parse_spec(json.dumps(spec_doc))
    backend = LocalBackend()
    return spec, backend, build_plan(spec, port_for=backend.allocate_port,
                                     place=backend.place)


def probes_left(*dirs: Path) -> list[str]:
    return [p.name for d in dirs if d.exists() for p in d.iterdir()
            if p.name.startswith(PROBE_PREFIX)]


def private_dir_python(tmp_path: Path, elsewhere: Path) -> str:
    """A `python` for the job that runs in directory ``elsewhere`` where its environment
    has PRIVATE_DISK (one role's, from the spec), so that role's relative model_dir lands
    on other storage, as on a host with a private mount."""
    wrapper = tmp_path / "bin" / "python"
    wrapper.parent.mkdir()
    wrapper.write_text(f'#!/bin/sh\nif [ -n "$PRIVATE_DISK" ]; then '
                       f'cd "{elsewhere}"; fi\nexec "{PY_TF215}" "$@"\n')
    wrapper.chmod(wrapper.stat().st_mode | stat.S_IXUSR)
    return str(wrapper)


def test_a_task_on_other_storage_is_refused_before_anything_starts(tmp_path):
    elsewhere = tmp_path / "private-disk"
    elsewhere.mkdir()
    python = private_dir_python(tmp_path, elsewhere)
    spec = tmp_path / "spec.json"
    spec.write_text(json.dumps({
        "cluster": {"chief": 1, "worker": 1, "ps": 2}, "command": [python, *SLEEP],
        "roles": {"ps": {"env": {"PRIVATE_DISK": "1"}}},
        "model_dir": "model", "workdir": str(tmp_path), "max_steps": 10,
        "run_dir": str(tmp_path / "runs")}))
    done = run_launch(str(spec), timeout=120)
    assert done.returncode == 2, done.stderr
    for ps in ("ps:0", "ps:1"):         # one probe for both, every task of it named
        assert f"{ps} on host localhost" in done.stderr
    assert "not the same storage" in done.stderr
    assert str(elsewhere / "model") in done.stderr
    for other in ("chief:0", "worker:0"):
        assert f"{other} on host" not in done.stderr
    (log,) = (tmp_path / "runs").glob("*/events.jsonl")
    (record,) = read_events(str(log))                   # nothing started
    assert record["event"] == "storage_check" and not record["ok"]
    assert record["tasks"]["ps:1"]["problem"] and not record["tasks"]["chief:0"]["problem"]
    assert probes_left(elsewhere / "model") == []
    assert not (tmp_path / "model").exists()     # the refused job left no model_dir


def test_shared_local_storage_passes_and_leaves_nothing(tmp_path):
    spec, backend, plan = make({"cluster": {"chief": 1, "ps": 1}, "evaluator": "localhost",
                                "command": [PY_TF215, *SLEEP],
                                "model_dir": str(tmp_path / "m"), "max_steps": 5})
    lines = []
    console = Console(out=None, err=None)
    console.info = lines.append
    check_shared_storage(plan, backend, console=console)
    assert lines == [f"model_dir {tmp_path / 'm'}: the same storage for all 3 tasks"]
    assert probes_left(tmp_path / "m") == []


def test_shared_storage_on_s3(s3, tmp_path):
    url = s3.url("preflight/model")
    spec, backend, plan = make({"cluster": {"chief": 1, "ps": 1},
                                "command": [PY_TF215, *SLEEP], "model_dir": url,
                                "max_steps": 5, "env": s3.env()})
    check_shared_storage(plan, backend)
    assert not [p for p in s3.filesystem().ls(url) if PROBE_PREFIX in p]


class CountingBackend(LocalBackend):
    """The local backend, its storage probes counted (each one still runs for real)."""

    def __init__(self):
        super().__init__()
        self.probed: list[str] = []

    def probe(self, task, argv, timeout):
        self.probed.append(task.name)
        return super().probe(task, argv, timeout)


def test_one_storage_probe_per_environment_not_per_task(s3, tmp_path):
    """Seven tasks on one host with one environment: one probe. A role whose environment
    from the spec differs (other credentials, another mount) gets a probe of its own, and
    the check still passes when it sees the same bucket."""
    spec = parse_spec(json.dumps({
        "cluster": {"chief": 1, "worker": 4, "ps": 2}, "command": [PY_TF215, *SLEEP],
        "model_dir": s3.url("per-host/model"), "max_steps": 5, "env": s3.env(),
        "roles": {"ps": {"env": {"DATA_ROOT": "/mnt/other"}}}}))
    backend = CountingBackend()
    plan = build_plan(spec, port_for=backend.allocate_port, place=backend.place)
    lines = []
    console = Console(out=None, err=None)
    console.info = lines.append
    check_shared_storage(plan, backend, console=console)
    assert sorted(backend.probed) == ["chief:0", "ps:0"]
    assert lines == [f"model_dir {s3.url('per-host/model')}: the same storage for all 7 tasks"]
    assert not [p for p in s3.filesystem().ls(s3.url("per-host/model")) if PROBE_PREFIX in p]


def test_a_task_that_cannot_reach_the_s3_server_is_refused(s3, tmp_path):
    elsewhere_env = dict(s3.env(), AWS_SECRET_ACCESS_KEY="wrong")
    spec, backend, plan = make({"cluster": {"chief": 1, "ps": 1},
                                "command": [PY_TF215, *SLEEP],
                                "model_dir": s3.url("refused/model"), "max_steps": 5,
                                "env": s3.env()})
    plan.task("ps", 0).env.update(elsewhere_env)     # ps:0's host has other credentials
    with pytest.raises(PreflightError) as err:
        check_shared_storage(plan, backend)
    assert "ps:0 on host localhost" in str(err.value)
    assert "cannot write model_dir" in str(err.value)
    assert "chief:0" not in str(err.value)


@pytest.mark.parametrize("step,retrain,skip", [(300, False, True), (300, True, False),
                                               (200, False, False)])
def test_a_finished_model_is_not_trained_again(tmp_path, step, retrain, skip):
    FakeTrainer(fsspec.filesystem("file"), str(tmp_path / "m"), shards=2).save(step)
    spec, _, plan = make({"cluster": {"chief": 1, "ps": 2}, "command": ["python", "x.py"],
                          "model_dir": str(tmp_path / "m"), "max_steps": 300})
    with open(os.devnull, "w") as null:
        console = Console(out=null, err=null)
        events = EventLog(str(tmp_path / "e.jsonl"))
        assert already_trained(plan, retrain, console, events) is skip


def test_progress_line():
    from orchestrator.checkpoints import Checkpoint

    ckpt = Checkpoint("model.ckpt-1200", "/m/model.ckpt-1200", 1200, "estimator", 2, 1200)
    p = Progress(max_steps=3000, checkpoint=ckpt, steps_per_sec=300.0, eta_secs=6.0,
                 latest_eval={"step": 1000, "split": "eval",
                              "metrics": {"accuracy": 0.91234, "loss": 0.3, "a_first": 1,
                                          "auc": 0.8, "precision": 0.7}})
    assert progress_line(p, 10) == ("progress: step 1200/3000 (40%), 300.0 steps/s, ETA 6s, "
                                    "checkpoint model.ckpt-1200; eval at step 1000: "
                                    "loss=0.3, accuracy=0.9123, auc=0.8, a_first=1")
    assert progress_line(Progress(), 10) == "progress: waiting for the first checkpoint"
    assert progress_line(Progress(), 10, restarts=2) == (
        "progress: waiting for the first checkpoint; 2 restarts")
    ahead = Progress(max_steps=3000, checkpoint=ckpt, events_step=1500)
    assert progress_line(ahead, 1) == ("progress: step 1500/3000 (50%) in the events file, "
                                      "checkpoint model.ckpt-1200")
