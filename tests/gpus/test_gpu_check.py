"""bench/gpu_check.py, the check for a machine with NVIDIA GPUs: its judgement of task
reports, and a whole run against the stand-in nvidia-smi (no TensorFlow, no GPU)."""

from __future__ import annotations

import os
import re
import subprocess
import sys

from support import REPO, fake_gpus

sys.path.insert(0, str(REPO / "bench"))
from gpu_check import check  # noqa: E402

UUIDS = {"0": "GPU-a", "1": "GPU-b", "2": "GPU-c"}


def report(task: str, visible: str, seen: int, memory: dict | None) -> dict:
    return {"task": task, "role": task.split(":")[0], "pid": 1, "visible": visible,
            "how": "torch", "seen": seen, "memory": memory}


def test_a_good_placement_passes():
    reports = [report("chief:0", "0", 1, {"GPU-a": 300}), report("worker:0", "1,2", 2,
                                                                  {"GPU-b": 300, "GPU-c": 300}),
               report("ps:0", "", 0, {})]
    gpus = {"chief:0": ["0"], "worker:0": ["1", "2"], "ps:0": []}
    assert check(reports, gpus, UUIDS) == []


def test_each_kind_of_wrong_placement_is_named():
    reports = [report("chief:0", "0", 1, {"GPU-a": 300, "GPU-b": 200}),
               report("worker:0", "0", 2, {"GPU-a": 300}),
               report("ps:0", "", 1, {"GPU-c": 500})]
    gpus = {"chief:0": ["0"], "worker:0": ["0"], "ps:0": [], "worker:1": ["2"]}
    problems = check(reports, gpus, UUIDS)
    assert "no report from worker:1" in problems
    assert "GPU 0 given to both chief:0 and worker:0" in problems
    assert "chief:0: holds memory on GPUs not its own: GPU-b" in problems
    assert "worker:0: sees 2 GPU(s), was given 1" in problems
    assert "ps:0: the ps holds GPU memory ({'GPU-c': 500})" in problems
    assert "ps:0: the ps sees 1 GPU(s)" in problems


def test_the_whole_check_runs_without_tensorflow_against_the_stand_in(tmp_path):
    env = {**os.environ, "PATH": f"{fake_gpus(tmp_path, 4)}:{os.environ['PATH']}",
           "PYTHONPATH": str(REPO)}
    done = subprocess.run([sys.executable, str(REPO / "bench" / "gpu_check.py"),
                           "--workers", "2"], env=env, capture_output=True, text=True,
                          timeout=180, cwd=tmp_path)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "OK: the trainers' GPUs are disjoint" in done.stdout
    rows = {ln.split()[0]: ln.split()[1:3] for ln in done.stdout.splitlines()
            if re.match(r"^[a-z]+:\d+ ", ln)}
    assert rows == {"chief:0": ["0,1", "'0,1'"], "ps:0": ["none", "''"],
                    "worker:0": ["2", "'2'"], "worker:1": ["3", "'3'"]}


def test_sharing_on_purpose_is_not_a_double_assignment():
    reports = [report("chief:0", "0", 1, {"GPU-a": 300}), report("worker:0", "0", 1,
                                                                  {"GPU-a": 300})]
    gpus = {"chief:0": ["0"], "worker:0": ["0"]}
    assert check(reports, gpus, UUIDS) == ["GPU 0 given to both chief:0 and worker:0"]
    assert check(reports, gpus, UUIDS, share=True) == []
