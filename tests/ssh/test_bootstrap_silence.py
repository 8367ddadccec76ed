"""The remote bootstrap on its own (run here, as ssh would run it on a host): it keeps its
task while the launcher's heartbeat comes, and ends it when the launcher goes silent (a
host cut off from the launcher leaves no orphan)."""

from __future__ import annotations

import json
import subprocess
import sys
import time

from launcher.backends import remote_bootstrap
from launcher.backends.ssh import BOOTSTRAP_SOURCE


def test_bootstrap_ends_its_task_once_the_heartbeat_stops(tmp_path):
    proc = subprocess.Popen([sys.executable, "-c", remote_bootstrap.STUB],
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    desc = {"nonce": "n0", "run": 7,
            "argv": [sys.executable, "-c", "import time; time.sleep(60)"],
            "env": {"TFCLUSTER_RUN_ID": "silence-test", "TFCLUSTER_TASK": "ps:0"},
            "cwd": str(tmp_path), "grace": 1, "silence": 1.5}
    try:
        proc.stdin.write(json.dumps(BOOTSTRAP_SOURCE) + "\n" + json.dumps(desc) + "\n")
        proc.stdin.flush()
        for _ in range(8):                       # 4 s of heartbeats: the task stays
            time.sleep(0.5)
            proc.stdin.write("0\n")
            proc.stdin.flush()
            assert proc.poll() is None
        silent = time.monotonic()
        proc.wait(timeout=15)                    # stdin stays open: only silence ends it
        took = time.monotonic() - silent
        out, err = proc.stdout.read(), proc.stderr.read()
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert 1.5 <= took < 1.5 + 1 + 2             # silence, then SIGTERM (the task obeys)
    assert "tfcluster-bootstrap: no word from the launcher for 1.5 s: ending the task" in out
    assert 'n0 status {"task": "7", "exit": -15}' in out, (out, err)
