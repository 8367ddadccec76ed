"""model_dir's lease on S3 (the SeaweedFS bed): the lease is created with a conditional put
(If-None-Match: *), a second run is refused while the first goes on, the lease of a
SIGKILLed launcher is taken over and released at the end (launcher/records/lease.py)."""

from __future__ import annotations

import json
import os
import signal
import sys
import uuid
from pathlib import Path

from support import REPO, cancelled_on_exit, detach, run_launch, state_of, wait_gone

from launcher.records.lease import LEASE_FILE, S3Store

FAKE_TASK = str(REPO / "tests" / "local" / "fake_task.py")


def test_the_server_refuses_a_second_exclusive_create(s3):
    store = S3Store(s3.filesystem(), f"{s3.bucket}/lease-{uuid.uuid4().hex[:8]}/{LEASE_FILE}")
    assert store.create(b'{"first": 1}') is True
    assert store.create(b'{"second": 2}') is False
    assert store.read() == b'{"first": 1}'
    store.remove()
    assert store.read() is None


def s3_spec(tmp_path: Path, s3, url: str, name: str, plan: dict) -> Path:
    spec = tmp_path / f"{name}.json"
    spec.write_text(json.dumps({
        "name": name, "cluster": {"chief": 1, "ps": 1}, "command": [sys.executable, FAKE_TASK],
        "model_dir": url, "max_steps": 10, "check_storage": False,
        "env": {"FAKE_PLAN": json.dumps(plan), **s3.env()}}))
    return spec


def test_one_live_run_per_s3_model_dir(s3, tmp_path, runs):
    url = s3.url(f"lease-{uuid.uuid4().hex[:8]}/model")
    lease = f"{url}/{LEASE_FILE}".removeprefix("s3://")
    fs = s3.filesystem()
    with cancelled_on_exit(tmp_path, runs):
        first = detach(s3_spec(tmp_path, s3, url, "first", {"chief": "forever",
                                                              "ps": "forever"}), runs)
        holder = json.loads(fs.cat_file(lease))
        assert holder["run_id"] == first
        quick = {"chief": "exit 0 after 0.2", "ps": "forever"}
        second = run_launch(str(s3_spec(tmp_path, s3, url, "second", quick)), env=runs,
                            timeout=60)
        assert second.returncode == 2, second.stdout + second.stderr
        assert second.stderr.strip().splitlines() == [second.stderr.strip()]
        assert second.stderr.startswith(f"launch: error: model_dir {url} is in use by run "
                                        f"{first} (host {holder['host']}, launcher pid "
                                        f"{holder['pid']}, heartbeat ")
        assert f"follow it with `launch status {first}`" in second.stderr
        os.kill(state_of(tmp_path, first)["launcher"]["pid"], signal.SIGKILL)
        assert not wait_gone(timeout=15), "the watchdog did not end the tasks"
        third = run_launch(str(s3_spec(tmp_path, s3, url, "third", quick)), env=runs,
                           timeout=120)
        assert third.returncode == 0, third.stderr
        assert f"model_dir lease taken over from run {first} " in third.stderr
        assert f"its launcher (pid {holder['pid']} on {holder['host']}) is gone" in third.stderr
    assert not fs.exists(lease)
