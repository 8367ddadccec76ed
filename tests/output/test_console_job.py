"""The console of whole jobs (no TensorFlow: a stand-in trainer that talks as TF does): off
a terminal, plain lines without TF's noise, while the logs keep every line; a failing task's
whole traceback; and the live view on a real pseudo-terminal."""

from __future__ import annotations

import fcntl
import json
import os
import pty
import select
import struct
import sys
import termios
import time
from pathlib import Path

from support import PY_TF215, run_launch

JOB = Path(__file__).resolve().parent / "jobs" / "chatty_trainer.py"
REPO = Path(__file__).resolve().parents[2]


def write_spec(tmp_path: Path, **extra) -> Path:
    spec = {"name": "chatty", "cluster": {"chief": 1, "ps": 1},
            "command": [PY_TF215, str(JOB)], "model_dir": str(tmp_path / "model"),
            "max_steps": 500, "run_dir": str(tmp_path / "runs"),
            "timeouts": {"poll": 0.2, "kill": 2}, **extra}
    path = tmp_path / "spec.json"
    path.write_text(json.dumps(spec))
    return path


def logs_of(tmp_path: Path) -> str:
    return "".join(p.read_text() for p in sorted((tmp_path / "runs").glob("*/logs/*.log")))


def test_plain_console_hides_noise_and_logs_keep_it(tmp_path):
    done = run_launch(str(write_spec(tmp_path)), timeout=120)
    assert done.returncode == 0, done.stderr
    out = done.stdout
    assert "[chief:0] user print: saved step 500" in out
    assert "[chief:0] epoch 5 - loss: 0.4" in out                 # the bar's latest state
    assert "1/10 [=" not in out
    assert "Instructions for updating" not in out and "INFO:tensorflow" not in out
    assert "Traceback" not in done.stderr + out
    logs = logs_of(tmp_path)
    assert logs.count("Instructions for updating:") == 2          # chief and ps
    assert "1/10 [=" in logs and "INFO:tensorflow:loss = 0.5, step = 500" in logs
    assert "lines of TensorFlow's routine output" in done.stderr
    verbose = run_launch(str(write_spec(tmp_path, model_dir=str(tmp_path / "m2"))),
                         "--verbose", timeout=120)
    assert verbose.returncode == 0, verbose.stderr
    assert "Instructions for updating" in verbose.stdout


def test_a_failing_task_shows_its_whole_traceback(tmp_path):
    done = run_launch(str(write_spec(tmp_path, env={"FAIL_AT": "200"})), timeout=120)
    assert done.returncode == 1, done.stderr
    shown = [line.removeprefix("[chief:0] ") for line in done.stdout.splitlines()
             if line.startswith("[chief:0]")]
    tb = shown[shown.index("Traceback (most recent call last):"):]
    assert tb[-1] == "ValueError: the input pipeline ran dry"
    log = (next((tmp_path / "runs").glob("*/logs/chief-0.log"))).read_text().splitlines()
    assert tb == log[log.index("Traceback (most recent call last):"):]   # every line of it
    assert len(tb) > 10
    assert "Instructions for updating" not in done.stdout


def run_in_pty(argv: list[str], env: dict[str, str], timeout: float = 120) -> tuple[int, str]:
    """Run ``argv`` with stdin, stdout and stderr on a new pseudo-terminal (120x40)."""
    pid, fd = pty.fork()
    if pid == 0:
        os.chdir(REPO)
        os.execve(argv[0], argv, env)
    fcntl.ioctl(fd, termios.TIOCSWINSZ, struct.pack("HHHH", 40, 120, 0, 0))
    chunks, deadline = [], time.monotonic() + timeout
    while time.monotonic() < deadline:
        ready, _, _ = select.select([fd], [], [], 0.5)
        if not ready:
            continue
        try:
            data = os.read(fd, 65536)
        except OSError:         # EIO: the child closed the terminal
            break
        if not data:
            break
        chunks.append(data)
    _, status = os.waitpid(pid, 0)
    os.close(fd)
    return os.waitstatus_to_exitcode(status), b"".join(chunks).decode(errors="replace")


def test_live_view_on_a_pseudo_terminal(tmp_path):
    env = {k: v for k, v in os.environ.items() if k not in ("COLUMNS", "LINES")}
    env.update(TERM="xterm-256color", PYTHONPATH=str(REPO))
    status, screen = run_in_pty([sys.executable, "-m", "launcher.cli",
                                 str(write_spec(tmp_path))], env)
    assert status == 0, screen[-3000:]
    assert "\x1b[" in screen                                   # drawn, not plain lines
    assert "━" in screen                                       # rich's progress bar
    assert "step 500/500 (100%)" in screen
    assert "tasks: " in screen and " up, " in screen and "restarting" in screen
    assert "[chief:0] user print: saved step 300" in screen     # output scrolls above it
    assert "tfcluster: progress:" not in screen                # the bar replaces these lines
    assert "Instructions for updating" not in screen
    assert screen.rindex("━") < screen.index("job succeeded")  # the view ends first
