"""Per-role commands and $(VAR) expansion against real TensorFlow: a TF1-style script that
reads --job_name/--task_index/--ps_hosts/--worker_hosts runs under `launch` with no
wrapper, and a ps with a command of its own (TonY-style JOB_NAME / TASK_INDEX)."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from support import PY_TF215, run_launch, tfcluster_tasks

pytestmark = pytest.mark.tf

JOBS = Path(__file__).resolve().parent / "jobs"
TF1 = [PY_TF215, str(JOBS / "tf1_replica.py"), "--job_name=$(TFCLUSTER_TASK_TYPE)",
       "--task_index=$(TFCLUSTER_TASK_INDEX)", "--ps_hosts=$(TFCLUSTER_PS_HOSTS)",
       "--worker_hosts=$(TFCLUSTER_WORKER_HOSTS)", "--train_dir=$(TFCLUSTER_MODEL_DIR)",
       "--train_steps=$(TFCLUSTER_MAX_STEPS)"]


def launch(tmp_path: Path, **extra):
    spec = {"name": "tf1", "cluster": {"worker": 2, "ps": 1}, "command": TF1,
            "model_dir": str(tmp_path / "model"), "max_steps": 200,
            "run_dir": str(tmp_path / "runs"), "timeouts": {"finish": 60}, **extra}
    path = tmp_path / "spec.json"
    path.write_text(json.dumps(spec))
    done = run_launch(str(path), "--run-dir", str(tmp_path / "run"), timeout=300)
    summary = json.loads((tmp_path / "run" / "summary.json").read_text())
    return done, {t["task"]: (t["exit"], t["stopped"]) for t in summary["tasks"]}


def log(tmp_path: Path, task: str) -> str:
    return (tmp_path / "run" / "logs" / f"{task}.log").read_text()


def test_tf1_flags_script_runs_a_ps_worker_cluster_without_a_wrapper(tmp_path):
    done, tasks = launch(tmp_path)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert tasks == {"ps:0": (-15, True), "worker:0": (0, False), "worker:1": (0, False)}
    plan = json.loads((tmp_path / "run" / "plan.json").read_text())
    w1 = next(t for t in plan["tasks"] if t["type"] == "worker" and t["index"] == 1)
    ps_addr = json.loads(w1["env"]["TF_CONFIG"])["cluster"]["ps"][0]
    assert f"--ps_hosts={ps_addr}" in w1["command"] and "--task_index=1" in w1["command"]
    assert f"ps 0 serving at {ps_addr}" in log(tmp_path, "ps-0")
    for i in (0, 1):
        step = int(re.search(r"done at global step (\d+)", log(tmp_path, f"worker-{i}"))[1])
        assert step >= 200
    state = (tmp_path / "model" / "checkpoint").read_text()
    assert re.search(r'model_checkpoint_path: "[^"]*model\.ckpt-2\d\d"', state)
    assert tfcluster_tasks() == []


def test_a_ps_with_a_command_of_its_own(tmp_path):
    """One worker: the rule is the ps's own command and environment."""
    done, tasks = launch(tmp_path, cluster={"worker": 1, "ps": 1}, roles={"ps": {
        "command": [PY_TF215, str(JOBS / "tony_ps.py")],
        "env": {"JOB_NAME": "$(TFCLUSTER_TASK_TYPE)", "TASK_INDEX": "$(TFCLUSTER_TASK_INDEX)"}}})
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert tasks == {"ps:0": (-15, True), "worker:0": (0, False)}
    assert "tony-style ps 0 serving" in log(tmp_path, "ps-0")
    assert "done at global step" in log(tmp_path, "worker-0")
    assert tfcluster_tasks() == []
