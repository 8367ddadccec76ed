"""Real Estimator jobs (TensorFlow 2.15) ended by the coordinator: at once when a ps is
killed, after timeouts.stall when a ps hangs; a job on S3 ended at max_steps. A real job
whose input repeats for ever, ended at the spec's max_steps (with what the coordinator read
of its real checkpoint and events files, and a second launch that starts nothing):
tests/ending/test_input_for_ever_real.py."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
from pathlib import Path

import pytest
from support import PY_TF215, REPO, launch_cmd, run_launch

from orchestrator.checkpoints import newest_complete

pytestmark = pytest.mark.tf
JOB = str(REPO / "tests" / "coordinator" / "jobs" / "repeat_forever.py")


def write_spec(tmp_path: Path, **overrides) -> Path:
    spec = {"name": "coord", "cluster": {"chief": 1, "ps": 2},
            "command": [PY_TF215, JOB], "model_dir": str(tmp_path / "model"),
            "run_dir": str(tmp_path / "runs"), "max_steps": 300,
            "timeouts": {"poll": 0.5, "finish": 5, "stall": 300}}
    spec.update(overrides)
    path = tmp_path / "spec.json"
    path.write_text(json.dumps(spec))
    return path


def events_of(tmp_path: Path) -> list[dict]:
    (log,) = (tmp_path / "runs").glob("*/events.jsonl")
    return [json.loads(line) for line in log.read_text().splitlines() if line.strip()]


def signal_the_ps_after_first_checkpoint(tmp_path: Path, spec: Path, sig: int) -> tuple[int, str]:
    """Start the job, wait for its first complete checkpoint, send ``sig`` to the ps, and
    wait for `launch` to end (the stall timeout is far away): (exit status, stderr)."""
    proc = subprocess.Popen(launch_cmd(str(spec), "--quiet"), cwd=REPO,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            stdin=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 240
        while newest_complete(str(tmp_path / "model")) is None:
            assert proc.poll() is None, proc.communicate()[1][-3000:]
            assert time.monotonic() < deadline, "no checkpoint within 240s"
            time.sleep(0.5)
        (ps,) = [e for e in events_of(tmp_path)
                 if e["event"] == "task_started" and e["task"] == "ps:0"]
        os.kill(ps["pid"], sig)
        _, stderr = proc.communicate(timeout=180)
    finally:
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
            proc.communicate(timeout=60)
    return proc.returncode, stderr


def test_killed_ps_ends_the_job_naming_it(tmp_path):
    spec = write_spec(tmp_path, cluster={"chief": 1, "ps": 1}, max_steps=10_000_000,
                      timeouts={"poll": 0.5, "finish": 5, "stall": 600},
                      restart={"ps": "never"})
    status, stderr = signal_the_ps_after_first_checkpoint(tmp_path, spec, signal.SIGKILL)
    assert status == 1, stderr[-3000:]
    assert "ps:0" in stderr and "SIGKILL" in stderr
    ended = [e for e in events_of(tmp_path) if e["event"] == "job_ended"]
    assert ended and "ps:0" in ended[0]["reason"]


def test_a_hung_ps_is_caught_as_a_stall_naming_the_silent_tasks(tmp_path):
    """A ps that stops answering without exiting (SIGSTOP: a hung host) leaves the chief
    waiting for ever; the coordinator ends the job after timeouts.stall."""
    spec = write_spec(tmp_path, cluster={"chief": 1, "ps": 1}, max_steps=10_000_000,
                      timeouts={"poll": 0.5, "finish": 5, "stall": 15, "kill": 2,
                                "start": 200})
    status, stderr = signal_the_ps_after_first_checkpoint(tmp_path, spec, signal.SIGSTOP)
    assert status == 1, stderr[-3000:]
    assert "training stalled" in stderr and "(timeouts.stall = 15s" in stderr
    assert "newest complete checkpoint model.ckpt-" in stderr
    assert "silent tasks still running: chief:0, ps:0" in stderr
    (decision,) = [e for e in events_of(tmp_path) if e["event"] == "coordinator"]
    assert decision["action"] == "fail" and decision["tasks"] == ["chief:0", "ps:0"]


def test_a_job_on_s3_is_watched_and_ended_at_max_steps(s3, tmp_path):
    """The launcher's coordinator reads an s3:// model_dir (credentials and endpoint from
    the spec's env); the chief is a stand-in writing checkpoints there in TF's order."""
    url = s3.url("e2e/model")
    job = str(REPO / "tests" / "coordinator" / "jobs" / "fake_trainer.py")
    spec = write_spec(tmp_path, model_dir=url, command=[PY_TF215, job], max_steps=500,
                      env=s3.env(), timeouts={"poll": 0.2, "finish": 1, "stall": 60})
    done = run_launch(str(spec), "--quiet", timeout=120)
    assert done.returncode == 0, done.stderr[-3000:]
    assert "checkpoint model.ckpt-500 reached max_steps 500" in done.stderr
    assert f"model_dir {url}: the same storage for all 3 tasks" in done.stderr
    reached = [e for e in events_of(tmp_path) if e["event"] == "checkpoint"]
    assert reached[-1]["path"].startswith("s3://") and reached[-1]["step"] >= 500
    ckpt = newest_complete(url, s3.storage_options())
    assert ckpt.step >= 500 and ckpt.shards == 2
