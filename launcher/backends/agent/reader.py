"""The launcher's one reader of an agent (launcher/backends/agent/): it starts the agent's
process (``ssh ... PYTHON -c STUB`` or ``srun ... PYTHON -c STUB``), sends the joined
source, writes one message a line, and reads the frames (launcher/backends/agent/wire.py)
on one thread: each task's output into that task's own pipe, its status into its handle,
each answer to its asker. Lines that are not frames (a login script's echo) go into every
task's output. The ssh session and the Slurm node step are this link, with their own ends.
"""

from __future__ import annotations

import itertools
import json
import secrets
import subprocess
import threading
import time
from collections.abc import Callable, Iterator
from typing import IO, Any, cast

from launcher.backends import agent
from launcher.backends.base import RelayedOutput, TaskHandle
from launcher.backends.processes import dies_with_parent
from launcher.plan import TaskPlan

KEPT = 50       # lines of the agent's stderr and stray stdout kept


def read_frames(stream: IO[bytes], nonce: str,
                stray: Callable[[bytes], None]) -> Iterator[tuple[str, str, bytes]]:
    """``(kind, key, bytes)`` of each frame on ``stream`` until its end; ``stray``
    gets every line that is not a frame of ``nonce``."""
    head = nonce.encode() + b" "
    for line in iter(stream.readline, b""):
        words = line[len(head):].split() if line.startswith(head) else []
        if len(words) != 3 or not words[2].isdigit():
            stray(line)
            continue
        data = stream.read(int(words[2]) + 1)[:-1]
        yield words[0].decode(), words[1].decode(), data


class AgentHandle(TaskHandle):
    """A task the agent runs: its output (a pipe the reader fills), its exit status as the
    agent reported it, and signals by control line."""

    def __init__(self, link: AgentLink, key: str, task: TaskPlan):
        self.link = link
        self.id = key
        self.task = task
        self.remote_pid: int | None = None
        self.exit: int | None = None
        self.relay = RelayedOutput()
        self.output: IO[bytes] = self.relay.output

    def poll(self) -> int | None:
        return self.exit

    def signal(self, sig: int) -> None:
        if self.poll() is None:
            self.link.signal(self.id, sig)


class AgentLink:
    """One agent process and the reader of its frames."""

    handle_class: type[AgentHandle] = AgentHandle

    def __init__(self, argv: list[str], env: dict[str, str] | None = None, name: str = ""):
        self.nonce = secrets.token_hex(8)
        self.handles: dict[str, AgentHandle] = {}  # key -> its handle, output open or not
        self.timed_out = False                     # a question got no answer in time
        self.said: list[str] = []                  # the agent's stderr (the last lines)
        self.stray: list[str] = []                 # stdout lines not the agent's
        self.last_heard = time.monotonic()         # the agent's last word
        self._ids = itertools.count()
        self._asked: dict[str, list] = {}          # question -> [Event, answer]
        self._lock = threading.Lock()              # stdin
        self._route = threading.Lock()             # the handles' pipes, the questions
        self._last: tuple[bytes | None, int | None] | None = None   # once it ended
        self.proc = subprocess.Popen(dies_with_parent(argv, env), env=env,
                                     stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                     stderr=subprocess.PIPE, start_new_session=True)
        self._stdin, self._stdout, self._stderr = (cast(IO[bytes], s) for s in (
            self.proc.stdin, self.proc.stdout, self.proc.stderr))
        self._errors = threading.Thread(target=self._read_stderr, name=f"{name}-err",
                                        daemon=True)
        self._errors.start()
        self._demux = threading.Thread(target=self._read_stdout, name=name, daemon=True)
        self._demux.start()
        self.send(agent.first_line())

    # ------------------------------------------------------------------ to the agent
    def send(self, data: bytes) -> bool:
        with self._lock:
            try:
                self._stdin.write(data)
                self._stdin.flush()
                return True
            except (OSError, ValueError):
                return False

    def message(self, fields: dict[str, Any]) -> bool:
        return self.send((json.dumps(dict(fields, nonce=self.nonce)) + "\n").encode())

    def run(self, task: TaskPlan, desc: dict[str, Any], key: str | None = None) -> AgentHandle:
        """Start ``task``: one line, no answer awaited."""
        handle = self.handle_class(self, key or str(next(self._ids)), task)
        with self._route:
            self.handles[handle.id] = handle
            if self._last is not None:      # the agent has ended: so has the task
                self._end(handle, *self._last)
                return handle
        self.message(dict(desc, run=handle.id))
        return handle

    def ask(self, message: dict[str, Any], timeout: float) -> tuple[dict | None, list[str]]:
        """Send a check or probe; its answer (None when none came in ``timeout`` s: then an
        agent that runs no task yet is killed) and the stray lines seen so far."""
        question = f"q{next(self._ids)}"
        waiting: list = [threading.Event(), None]
        with self._route:
            self._asked[question] = waiting
        if self.proc.poll() is None and self.message(dict(message, ask=question)):
            waiting[0].wait(timeout)
        with self._route:
            self._asked.pop(question, None)
        if waiting[1] is None and not waiting[0].is_set():
            self.timed_out = True
            if not self.handles:
                self.proc.kill()
        return waiting[1], list(self.stray)

    def signal(self, key: str, sig: int) -> None:
        self.send(f"{key} {int(sig)}\n".encode())

    def close_stdin(self) -> None:
        """End of stdin: the agent ends every task's group (SIGTERM, then SIGKILL after
        their grace), then itself."""
        with self._lock:
            try:
                self._stdin.close()
            except OSError:
                pass

    # ------------------------------------------------------------------ from the agent
    def _read_stdout(self) -> None:
        try:
            for kind, key, data in read_frames(self._stdout, self.nonce, self._stray):
                self.last_heard = time.monotonic()
                if kind == "out":
                    self._to_task(key, data)
                elif kind == "status":
                    self._status(key, json.loads(data))
                elif kind == "answer":
                    self._answer(key, json.loads(data))
        except (OSError, ValueError):
            pass
        finally:
            last = self.last_words()
            with self._route:
                self._last = last
                for handle in self.handles.values():
                    self._end(handle, *last)
                for waiting in self._asked.values():
                    waiting[0].set()

    @staticmethod
    def _end(handle: AgentHandle, words: bytes | None, status: int | None) -> None:
        """The agent ended: the task's output ends (after ``words`` when it still ran)."""
        if handle.exit is None and words:
            handle.relay.write(words)
        handle.relay.close()
        if handle.exit is None and status is not None:
            handle.exit = status

    def last_words(self) -> tuple[bytes | None, int | None]:
        """Once the agent's stdout ended: what the output of each task it did not end
        closes with, and their status (None: as the process's end says)."""
        return None, None

    def _to_task(self, key: str, data: bytes) -> None:
        with self._route:
            handle = self.handles.get(key)
            if handle is not None:
                if data:
                    handle.relay.write(data)
                else:
                    handle.relay.close()

    def _status(self, key: str, status: dict[str, Any]) -> None:
        handle = self.handles.get(key)
        if handle is None:
            return
        if "started" in status:
            handle.remote_pid = status["started"]
        if "refused" in status:
            handle.start_failure = str(status["refused"])
        if "exit" in status:
            handle.exit = int(status["exit"])

    def _answer(self, key: str, answer: dict[str, Any]) -> None:
        with self._route:
            waiting = self._asked.get(key)
        if waiting is not None:
            waiting[1] = answer
            waiting[0].set()

    def _stray(self, line: bytes) -> None:
        self.last_heard = time.monotonic()
        self.stray = [*self.stray[1 - KEPT:], line.decode(errors="replace").rstrip("\r\n")]
        self.to_all(line)

    def to_all(self, line: bytes) -> None:
        with self._route:
            for handle in self.handles.values():
                handle.relay.write(line)

    def _read_stderr(self) -> None:
        try:
            for line in iter(self._stderr.readline, b""):
                self.said = [*self.said[1 - KEPT:], line.decode(errors="replace").rstrip("\r\n")]
                self.heard(line)
        finally:
            self._stderr.close()

    def heard(self, line: bytes) -> None:
        """A line on the agent's stderr (kept in ``said``)."""
