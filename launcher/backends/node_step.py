"""The launcher's side of launcher/backends/slurm_node.py: one ``srun`` step per node that
runs the node agent, and a handle per task started through it.

``NodeStep`` writes the agent's source and then one JSON line per start or signal to the
step's stdin; one thread reads the agent's frames and hands each task's bytes to that
task's own pipe, so a task's output is a plain byte stream, read as every backend's is.
A task's handle ends when the agent says it ended, or, without a word, when the step
itself ended (then its status is the step's, and the step's last stderr lines are the
task's last output).
"""

from __future__ import annotations

import collections
import json
import signal
import subprocess
import threading
from pathlib import Path
from typing import IO, Any

from launcher.backends import remote_bootstrap, slurm_node
from launcher.backends.base import RelayedOutput, TaskHandle
from launcher.backends.processes import dies_with_parent
from launcher.plan import TaskPlan

AGENT_SOURCE = json.dumps(Path(remote_bootstrap.__file__).read_text(encoding="utf-8") + "\n"
                          + Path(slurm_node.__file__).read_text(encoding="utf-8")) + "\n"
STDERR_TAIL = 20        # lines of the step's own stderr kept for a task it takes down
LOST = -signal.SIGKILL  # a task whose step ended without a word from the agent


class NodeTaskHandle(TaskHandle):
    """A task run by a node step's agent. ``output`` is the read end of its own pipe."""

    def __init__(self, task: TaskPlan, step: NodeStep, key: str):
        self.task = task
        self.step = step
        self.key = key
        self.status: int | None = None
        self.relay = RelayedOutput()        # the agent's frames of this task's output
        self.output: IO[bytes] = self.relay.output

    def end(self, status: int, refused: str | None = None) -> None:
        """Its output ended, then the task: EOF first, so every byte is read before the
        job loop sees the exit."""
        self.relay.close()
        if refused:
            self.start_failure = refused
        self.status = status

    def poll(self) -> int | None:
        return self.status

    def signal(self, sig: int) -> None:
        if self.status is None:
            self.step.send({"signal": self.key, "sig": int(sig)})


class NodeStep:
    """One ``srun`` step on one node running the node agent, for all the job's tasks there."""

    def __init__(self, argv: list[str], env: dict[str, str], node: str):
        self.node = node
        self.tasks: dict[str, NodeTaskHandle] = {}
        self._starts = 0
        self.ended = False      # the step ended: a task started now ends at once
        self._lock = threading.Lock()
        self.stderr: collections.deque[str] = collections.deque(maxlen=STDERR_TAIL)
        self.proc = subprocess.Popen(dies_with_parent(argv, env), env=env,
                                     stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                     stderr=subprocess.PIPE, start_new_session=True)
        assert self.proc.stdin is not None
        self.proc.stdin.write(AGENT_SOURCE.encode())
        self.proc.stdin.flush()
        for target in (self._read_frames, self._read_stderr):
            threading.Thread(target=target, daemon=True, name=f"slurm-{node}").start()

    def alive(self) -> bool:
        return not self.ended and self.proc.poll() is None

    def start(self, task: TaskPlan, env: dict[str, str]) -> NodeTaskHandle:
        with self._lock:
            self._starts += 1
            key = f"{task.name}#{self._starts}"
            handle = NodeTaskHandle(task, self, key)
            if self.ended:
                handle.end(LOST)
                return handle
            self.tasks[key] = handle
        self.send({"start": key, "argv": list(task.command), "env": env,
                   "cwd": task.cwd or None, "host": task.host})
        return handle

    def send(self, message: dict[str, Any]) -> None:
        with self._lock:
            stdin = self.proc.stdin
            if stdin is None or stdin.closed:
                return
            try:
                stdin.write(json.dumps(message).encode() + b"\n")
                stdin.flush()
            except OSError:     # the step ended: _read_frames ends its tasks
                pass

    def close(self) -> None:
        """End of the agent's stdin: it stops what still runs (TERM, then KILL) and ends."""
        with self._lock:
            if self.proc.stdin is not None and not self.proc.stdin.closed:
                try:
                    self.proc.stdin.close()
                except OSError:
                    pass

    def _read_frames(self) -> None:
        stream = self.proc.stdout
        assert stream is not None
        while True:
            header = stream.readline().split()
            if len(header) != 3 or not header[2].isdigit():
                break
            kind, key, data = header[0], header[1].decode(), stream.read(int(header[2]) + 1)[:-1]
            handle = self.tasks.get(key)
            if handle is None:
                continue
            if kind == b"o":
                handle.relay.write(data)
            elif kind == b"x":
                word = json.loads(data)
                handle.end(int(word["exit"]), word.get("refused"))
                with self._lock:
                    self.tasks.pop(key, None)
        status = self.proc.wait()
        with self._lock:
            self.ended = True
            left, self.tasks = list(self.tasks.values()), {}
        tail = "".join(f"tfcluster: the Slurm step on {self.node}: {line}\n"
                       for line in self.stderr)
        for handle in left:
            handle.relay.write(tail.encode())
            handle.end(-status if status < 0 else LOST)

    def _read_stderr(self) -> None:
        assert self.proc.stderr is not None
        for line in self.proc.stderr:
            self.stderr.append(line.decode(errors="replace").rstrip())
