"""A real local job on a machine with 4 stand-in GPUs (tests/fake_gpu): its tasks (the ps a
real TensorFlow server the launcher probes) report the CUDA_VISIBLE_DEVICES they were
given; a killed worker comes back on its own devices; the closing table and `launch
status` show every task's."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest
from support import PY_TF215, fake_gpus, launch_cmd, run_dir, run_launch

JOB = str(Path(__file__).with_name("jobs") / "devices_task.py")


def reports(folder: Path) -> dict[str, list[dict]]:
    out: dict[str, list[dict]] = {}
    for path in sorted(folder.glob("*.json")):
        doc = json.loads(path.read_text())
        out.setdefault(doc["task"], []).append(doc)
    return {k: sorted(v, key=lambda d: d["start"]) for k, v in out.items()}


@pytest.mark.tf
def test_local_tasks_get_disjoint_devices_and_keep_them_across_a_restart(tmp_path):
    folder = tmp_path / "reports"
    folder.mkdir()
    spec = tmp_path / "gpus.json"
    spec.write_text(json.dumps({
        "name": "gpus", "cluster": {"chief": 1, "worker": 2, "ps": 1},
        "command": [PY_TF215, JOB],
        "model_dir": str(tmp_path / "model"), "run_dir": str(tmp_path / "runs"),
        "max_steps": 10, "env": {"GPU_REPORTS": str(folder)},
        "timeouts": {"kill": 3, "finish": 3, "start": 240},   # 2 shared cores: TF imports slowly
        "restart": {"worker": {"policy": "on-failure", "max_restarts": 1, "backoff": 0.2}}}))
    env = {"PATH": f"{fake_gpus(tmp_path, 4)}:{os.environ['PATH']}"}
    done = run_launch(str(spec), env=env, timeout=400)
    assert done.returncode == 0, done.stderr
    seen = reports(folder)
    visible = {task: [r["cuda_visible_devices"] for r in runs] for task, runs in seen.items()}
    # the documented defaults: trainers split the 4 GPUs, the ps on CPU (the evaluator's
    # default: tests/gpus/test_gpu_plan.py); a killed worker restarted on the same devices
    assert visible == {"ps:0": [""], "chief:0": ["0,1"], "worker:0": ["2"],
                       "worker:1": ["3", "3"]}
    assert [r["restart_count"] for r in seen["worker:1"]] == ["0", "1"]
    assert "[worker:1] worker:1 start 1: CUDA_VISIBLE_DEVICES='3'" in done.stdout
    # the closing table's gpus column, summary.json and `launch status`
    table = {ln.split()[0]: ln.split()[2] for ln in done.stderr.splitlines()
             if ln.split() and ln.split()[0] in visible}
    assert table == {"ps:0": "none", "chief:0": "0,1", "worker:0": "2", "worker:1": "3"}
    summary = json.loads((run_dir(tmp_path) / "summary.json").read_text())
    assert {r["task"]: r["gpus"] for r in summary["tasks"]}["chief:0"] == ["0", "1"]
    plan = json.loads((run_dir(tmp_path) / "plan.json").read_text())
    assert {t["type"] + ":" + str(t["index"]): t["gpus"] for t in plan["tasks"]}["ps:0"] == []
    status = subprocess.run(launch_cmd("status", str(run_dir(tmp_path))), text=True,
                            capture_output=True, env={**os.environ, **env}, timeout=60)
    assert status.returncode == 0, status.stderr
    rows = {ln.split()[0]: ln.split()[2] for ln in status.stdout.splitlines()
            if ln.split() and ln.split()[0] in visible}
    assert rows == table
