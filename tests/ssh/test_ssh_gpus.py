"""GPUs over ssh (docs/gpus.md): each netns host answers the launcher's nvidia-smi query in
its preflight check (a stand-in with 2 GPUs on h1, 1 on h2, put on the tasks' PATH); the
tasks (tests/gpus/jobs/devices_task.py, its ps a stand-in answering the probe: no TensorFlow,
this is the ssh backend's mechanics) report the CUDA_VISIBLE_DEVICES they were given. The
real TensorFlow ps with stand-in GPUs: tests/gpus/test_gpu_jobs.py."""

from __future__ import annotations

import json
from pathlib import Path

from ssh_specs import write_spec
from support import PY_TF215, fake_gpus, run_dir, run_launch

JOB = str(Path(__file__).resolve().parents[1] / "gpus" / "jobs" / "devices_task.py")


def test_each_host_gives_its_own_gpus_to_its_tasks(hosts, tmp_path):
    reports = tmp_path / "reports"
    reports.mkdir()
    path = f"{fake_gpus(tmp_path, {'h1': 2, 'h2': 1})}:/usr/local/bin:/usr/bin:/bin"
    spec = write_spec(tmp_path, hosts, {"chief": ["h1"], "worker": ["h1", "h2"], "ps": ["h2"]},
                      command=[PY_TF215, JOB], max_steps=10,
                      env={"GPU_REPORTS": str(reports), "PATH": path,
                           "DEVICES_TASK_PS": "stand-in"},
                      restart={"worker": {"policy": "on-failure", "max_restarts": 1,
                                          "backoff": 0.2}},
                      timeouts={"kill": 3, "finish": 5, "start": 60})
    done = run_launch(str(spec), timeout=400)
    assert done.returncode == 0, done.stderr[-3000:]
    seen: dict[str, list[tuple[str, str]]] = {}
    for report in sorted(reports.glob("*.json")):
        doc = json.loads(report.read_text())
        seen.setdefault(doc["task"], []).append((doc["host"], doc["cuda_visible_devices"]))
    # h1's two GPUs split between its trainers; h2's one to its trainer, none to its ps;
    # worker:1, killed once, came back on its device
    assert seen == {"chief:0": [("h1", "0")], "worker:0": [("h1", "1")],
                    "worker:1": [("h2", "0"), ("h2", "0")], "ps:0": [("h2", "")]}
    plan = json.loads((run_dir(tmp_path) / "plan.json").read_text())
    assert {f"{t['type']}:{t['index']}": t["gpus"] for t in plan["tasks"]} == {
        "ps:0": [], "chief:0": ["0"], "worker:0": ["1"], "worker:1": ["0"]}


def test_an_over_ask_on_a_host_is_refused_after_its_check(hosts, tmp_path):
    path = f"{fake_gpus(tmp_path, {'h1': 2, 'h2': 1})}:/usr/local/bin:/usr/bin:/bin"
    spec = write_spec(tmp_path, hosts, {"chief": ["h1"], "worker": ["h2"]},
                      command=[PY_TF215, "-c", "pass"], max_steps=10, env={"PATH": path},
                      resources={"worker": {"gpus": 2}})
    done = run_launch(str(spec), timeout=120)
    assert done.returncode == 2
    address = hosts.hosts[1].address
    assert done.stderr.strip().splitlines()[-1] == (
        f"launch: error: host {address}: worker:0 (2 GPUs) ask for 2 GPUs, and it has "
        "1 GPU (0); nothing was started")
    assert not (tmp_path / "model").exists()
