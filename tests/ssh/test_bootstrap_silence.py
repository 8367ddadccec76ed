"""The agent on its own (run here, as ssh would run it on a host): it keeps its task while
the launcher's heartbeat comes, and ends it when the launcher goes silent (a host cut off
from the launcher leaves no orphan); one agent runs a host's tasks apart."""

from __future__ import annotations

import io
import json
import signal
import socket
import subprocess
import sys
import time

from launcher.api import validate
from launcher.backends import agent
from launcher.backends.agent.entry import SSH_STUB
from launcher.backends.agent.reader import read_frames
from launcher.backends.ssh import HostSession
from launcher.plan import build_plan


def test_bootstrap_ends_its_task_once_the_heartbeat_stops(tmp_path):
    proc = subprocess.Popen([sys.executable, "-c", SSH_STUB],
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    desc = {"nonce": "n0", "run": 7,
            "argv": [sys.executable, "-c", "import time; time.sleep(60)"],
            "env": {"TFCLUSTER_RUN_ID": "silence-test", "TFCLUSTER_TASK": "ps:0"},
            "cwd": str(tmp_path), "grace": 1, "silence": 1.5}
    try:
        proc.stdin.write(agent.first_line().decode() + json.dumps(desc) + "\n")
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
    frames = list(read_frames(io.BytesIO(out.encode()), "n0", lambda line: None))
    assert ("out", "7", b"tfcluster-bootstrap: no word from the launcher for 1.5 s: ending "
            b"the task\n") in frames
    assert frames[-2:] == [("out", "7", b""), ("status", "7", b'{"exit": -15}')], (out, err)


def test_one_bootstrap_runs_several_tasks_apart():
    """A host's tasks in one agent (run here as ssh would run it): each task's output
    and exit status come back to its own handle, a signal reaches only its task, a refused
    command is one line, and the end of stdin ends the rest."""
    session = HostSession("here", [sys.executable, "-I", "-S", "-c", SSH_STUB])
    code = "import sys, time; print('up', sys.argv[1], flush=True); time.sleep(int(sys.argv[2]))"
    ports = iter(range(20000, 20010))
    plan = build_plan(validate({"cluster": {"worker": 2, "ps": 1}, "model_dir": "/tmp/m",
                                "command": ["python3"]}), port_for=lambda host: next(ports))
    handles = []
    try:
        for name, secs in (("worker:0", "0"), ("worker:1", "60"), ("ps:0", "60")):
            argv = [sys.executable, "-c", code, name, secs]
            role, _, index = name.partition(":")
            handles.append(session.run(plan.task(role, int(index)), {"task": name, "argv": argv,
                                                         "env": {}, "cwd": None, "grace": 1}))
        refused = session.run(handles[0].task, {"task": "worker:0", "argv": ["/no/such/program"],
                                                "env": {}, "cwd": None, "grace": 1})
        assert [h.output.readline().decode() for h in handles] == \
            ["up worker:0\n", "up worker:1\n", "up ps:0\n"]
        handles[1].signal(signal.SIGTERM)
        deadline = time.monotonic() + 15
        while (handles[0].poll() is None or handles[1].poll() is None) and \
                time.monotonic() < deadline:
            time.sleep(0.02)
        assert [h.poll() for h in handles] == [0, -signal.SIGTERM, None]
        assert refused.poll() == 127
        assert refused.output.read().decode() == \
            "tfcluster-bootstrap: worker:0: cannot start /no/such/program on " \
            f"{socket.gethostname()}: not found\n"
    finally:
        session.discard()
    assert handles[2].poll() == -signal.SIGTERM          # ended with the agent's stdin
    assert handles[0].output.read() == b""               # each output ended
