"""TensorBoard with an ssh run: it runs on the chief's host (a real sshd in a network
namespace), this machine reaches it at that host's address, and Ctrl-C leaves nothing on
any host."""

from __future__ import annotations

import json
import re
import signal
import subprocess
import threading
import time
import urllib.request
from pathlib import Path

import psutil
from ssh_specs import write_spec
from support import PY_TF215, REPO, launch_cmd

SLEEPER = str(Path(__file__).resolve().parent / "jobs" / "sleeper.py")


def test_tensorboard_runs_on_the_chiefs_host_and_ends_with_the_run(hosts, tmp_path):
    spec = write_spec(tmp_path, hosts, {"chief": ["h1"], "worker": ["h2"]},
                      command=[PY_TF215, SLEEPER], tensorboard=True,
                      timeouts={"kill": 2, "start": 60, "unresponsive": 0})
    proc = subprocess.Popen(launch_cmd(str(spec), "--quiet"), cwd=REPO, text=True,
                            stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                            stderr=subprocess.PIPE)
    lines: list[str] = []
    reader = threading.Thread(target=lambda: lines.extend(proc.stderr), daemon=True)
    reader.start()
    h1 = hosts.hosts[0]
    try:
        deadline = time.monotonic() + 240
        url = None
        while url is None and time.monotonic() < deadline and proc.poll() is None:
            found = [m for m in map(re.compile(r"TensorBoard: (http://\S+)").search, lines)
                     if m]
            url = found[0].group(1) if found else None
            time.sleep(0.2)
        assert url and url.startswith(f"http://{h1.address}:"), "".join(lines)
        with urllib.request.urlopen(f"{url}data/runs", timeout=10) as answer:
            assert json.loads(answer.read()) == []          # served, nothing written yet
        on_h1 = []
        for p in hosts.processes(h1):
            try:
                on_h1.append(p.environ().get("TFCLUSTER_TASK"))
            except psutil.Error:
                continue
        assert "tensorboard:0" in on_h1
    finally:
        proc.send_signal(signal.SIGINT)
        status = proc.wait(timeout=120)
        reader.join(timeout=10)
    assert status == 130, "".join(lines)
    assert hosts.leftovers(timeout=20) == {}
