"""The agent (launcher/backends/agent/): its joined source, and its protocol driven over
plain pipes, without sshd or Slurm: the agent runs here as ``python -c STUB`` would run on
a host, and the test speaks the launcher's side of the wire by hand (start a task, relay
its output, kill its group, the sign of life, a probe, the silence watch)."""

from __future__ import annotations

import ast
import json
import subprocess
import sys
import threading
import time
from collections.abc import Iterator

import psutil
import pytest

from launcher.backends import agent
from launcher.backends.agent.entry import SSH_STUB
from launcher.backends.agent.reader import read_frames

SLEEPER = ("import subprocess, sys, time\n"
           "child = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(60)'])\n"
           "print('up', child.pid, flush=True)\n"
           "time.sleep(60)\n")


def defined_names(module: str) -> set[str]:
    """The top-level names a module of the agent defines (its imports left aside: the
    same standard module imported twice is the same name bound to the same thing)."""
    names: set[str] = set()
    for node in ast.parse(agent.module_source(module)).body:
        if isinstance(node, ast.FunctionDef | ast.ClassDef):
            names.add(node.name)
        elif isinstance(node, ast.Assign):
            names.update(t.id for t in node.targets if isinstance(t, ast.Name))
        elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
            names.add(node.target.id)
    return names


def test_no_two_joined_modules_define_the_same_name():
    seen: dict[str, str] = {}
    clashes = []
    for module in agent.ORDER:
        for name in sorted(defined_names(module)):
            if name in seen:
                clashes.append(f"{name}: {seen[name]} and {module}")
            seen[name] = module
    assert clashes == []
    assert {"spawn", "send_frame", "start_failure_line", "main", "serve"} <= set(seen)


def test_the_joined_source_is_the_standard_library_and_its_own_modules_only():
    source = agent.source()
    ast.parse(source, feature_version=(3, 6))      # a host's Python may be that old
    imported = {alias.name.split(".")[0] for node in ast.walk(ast.parse(source))
                if isinstance(node, ast.Import) for alias in node.names}
    imported |= {(node.module or "").split(".")[0] for node in ast.walk(ast.parse(source))
                 if isinstance(node, ast.ImportFrom)}
    assert imported - set(sys.stdlib_module_names) == set()
    assert [m for m in agent.ORDER if f"# ---- launcher/backends/agent/{m}.py" not in source] == []
    at = [source.index(f"/agent/{m}.py") for m in agent.ORDER]
    assert at == sorted(at)                 # in the fixed order


class Wire:
    """The launcher's side of one agent, by hand: lines to its stdin, its frames read."""

    def __init__(self, nonce: str = "n0"):
        self.nonce = nonce
        self.proc = subprocess.Popen([sys.executable, "-I", "-S", "-c", SSH_STUB],
                                     stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                     stderr=subprocess.PIPE)
        assert self.proc.stdin is not None and self.proc.stdout is not None
        self.stray: list[bytes] = []
        self.frames: Iterator[tuple[str, str, bytes]] = read_frames(
            self.proc.stdout, nonce, self.stray.append)
        self.write(agent.first_line())

    def write(self, data: bytes) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.write(data)
        self.proc.stdin.flush()

    def message(self, **fields) -> None:
        self.write(json.dumps(dict(fields, nonce=self.nonce)).encode() + b"\n")

    def next(self, kind: str | None = None, timeout: float = 30) -> tuple[str, str, bytes]:
        """The next frame (of ``kind``: others are skipped); fails after ``timeout`` s."""
        found: list = []

        def read() -> None:
            for frame in self.frames:
                if kind is None or frame[0] == kind:
                    found.append(frame)
                    return

        reader = threading.Thread(target=read, daemon=True)
        reader.start()
        reader.join(timeout)
        assert found, f"no {kind or ''} frame in {timeout} s"
        return found[0]

    def line(self, key: str) -> bytes:
        """Task ``key``'s output up to its first newline (frames carry what a read got)."""
        data = b""
        while not data.endswith(b"\n"):
            kind, at, more = self.next("out")
            assert at == key and more, (at, data)
            data += more
        return data

    def end(self) -> int:
        if self.proc.poll() is None:
            assert self.proc.stdin is not None
            self.proc.stdin.close()
            try:
                return self.proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
        return self.proc.wait()


@pytest.fixture
def wire():
    link = Wire()
    yield link
    link.end()


def gone(pid: int, timeout: float = 20) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            if psutil.Process(pid).status() == psutil.STATUS_ZOMBIE:
                return True
        except psutil.NoSuchProcess:
            return True
        time.sleep(0.05)
    return False


def test_a_task_started_relayed_and_its_group_killed(wire, tmp_path):
    wire.message(run="1", task="worker:0", argv=[sys.executable, "-c", SLEEPER], env={},
                 cwd=str(tmp_path), grace=1)
    kind, key, data = wire.next("status")
    assert (kind, key) == ("status", "1") and json.loads(data)["started"] > 0
    up, grandchild = wire.line("1").split()     # a process in the task's group
    assert up == b"up"
    wire.write(b"1 9\n")                     # SIGKILL to task 1's group
    assert wire.next("out") == ("out", "1", b"")                  # its output ended...
    assert wire.next("status") == ("status", "1", b'{"exit": -9}')   # ...then the task
    assert gone(int(grandchild))             # the whole group, not only the task
    wire.write(b"0\n")                       # a sign of life is answered
    assert wire.next("alive") == ("alive", "-", b"")
    assert wire.end() == 0 and wire.stray == []


def test_a_refused_command_and_a_probe_answer_in_frames(wire):
    wire.message(run="2", task="ps:0", argv=["/no/such/program"], env={}, cwd=None, grace=1)
    assert wire.next("out")[2].startswith(b"tfcluster-bootstrap: ps:0: cannot start "
                                          b"/no/such/program on ")
    status = json.loads(wire.next("status")[2])
    assert status["exit"] == 127 and status["refused"].endswith(": not found")
    wire.message(ask="q1", probe={"argv": [sys.executable, "-c", "print('probed')"],
                                  "env": {}, "cwd": None, "timeout": 30})
    kind, key, data = wire.next("answer")
    assert (key, json.loads(data)) == ("q1", {"status": 0, "output": "probed\n"})


def test_silence_from_the_launcher_ends_the_tasks_and_the_agent(wire, tmp_path):
    wire.message(run="3", task="worker:1", argv=[sys.executable, "-c", SLEEPER], env={},
                 cwd=str(tmp_path), grace=1, silence=1.5)
    grandchild = int(wire.line("3").split()[1])
    said = wire.next("out")                  # stdin stays open: only the silence ends it
    assert said == ("out", "3", b"tfcluster-bootstrap: no word from the launcher for 1.5 s: "
                                b"ending the task\n")
    assert wire.next("status") == ("status", "3", b'{"exit": -15}')
    assert wire.proc.wait(timeout=30) == 0 and gone(grandchild)
