"""A run directory that cannot take what the launcher writes: a full disk (a 64 KB tmpfs
that fills mid-job with two chatty tasks) and a run directory removed mid-run. The job is
never hung and never a traceback: the pumps keep draining the tasks' output, each loss is
said once in one line, the job ends by itself, and the closing lines say what was dropped.
Training itself is in model_dir, which is elsewhere."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from support import run_launch

CHATTY = str(Path(__file__).with_name("jobs") / "chatty_task.py")


@pytest.fixture
def small_disk(tmp_path: Path):
    """A 64 KB tmpfs (tests run as root)."""
    where = tmp_path / "small"
    where.mkdir()
    mounted = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=64k", "tmpfs", str(where)],
                             capture_output=True, text=True)
    if mounted.returncode != 0:
        why = f"cannot mount a tmpfs: {mounted.stderr.strip()}"
        if os.environ.get("CI"):
            pytest.fail(why)
        pytest.skip(why)
    try:
        yield where
    finally:
        subprocess.run(["umount", "-l", str(where)], check=False)


def write_spec(tmp_path: Path, runs: Path, **env: str) -> Path:
    spec = tmp_path / "spec.json"
    spec.write_text(json.dumps({
        "name": "chatty", "cluster": {"chief": 1, "worker": 1},
        "command": [sys.executable, CHATTY], "model_dir": str(tmp_path / "model"),
        "run_dir": str(runs), "timeouts": {"finish": 30}, "env": env}))
    return spec


def test_a_full_run_dir_drops_task_output_and_the_job_ends_by_itself(tmp_path, small_disk):
    done = run_launch(str(write_spec(tmp_path, small_disk)), "--quiet", timeout=120)
    assert done.returncode == 0, done.stderr[-3000:]
    assert "Traceback" not in done.stderr
    said = [line for line in done.stderr.splitlines() if "task output is being dropped" in line]
    assert said == ["tfcluster: task logs: cannot write, the disk is full (ENOSPC): task "
                    "output is being dropped; the job goes on (training is in model_dir)"]
    closing = next(line for line in done.stderr.splitlines()
                   if line.startswith("tfcluster: task output dropped"))
    assert closing.startswith("tfcluster: task output dropped, the disk is full (ENOSPC): ")
    dropped = dict(part.rsplit(" ", 2)[:2] for part in
                   closing.split("(ENOSPC): ", 1)[1].split(", "))
    assert set(dropped) == {"chief:0", "worker:0"} and all(int(n) > 10000
                                                           for n in dropped.values())
    assert "job succeeded" in done.stderr


def test_a_run_dir_removed_mid_run_is_said_and_the_job_ends_by_itself(tmp_path):
    runs = tmp_path / "runs"
    run_dir = runs / "gone"
    done = run_launch(str(write_spec(tmp_path, runs, CHATTY_REMOVE=str(run_dir),
                                     CHATTY_LINES="2000")),
                      "--quiet", "--run-dir", str(run_dir), timeout=120)
    assert done.returncode == 0, done.stderr[-3000:]
    assert "Traceback" not in done.stderr
    lost = [line for line in done.stderr.splitlines() if "cannot write" in line]
    assert lost and all(", the run directory was removed (ENOENT)" in line for line in lost)
    assert len(lost) == len({line.split(":")[1] for line in lost})   # each said once
    assert "tfcluster: events.jsonl not written, the run directory was removed (ENOENT)" \
        in done.stderr.splitlines()
    assert "job succeeded" in done.stderr
