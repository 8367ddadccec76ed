"""One agent on a host, through ``ssh``: the host's check, its probes (each answered by one
frame; probes run at once, beside each other and the tasks), and every task of the host,
read by the agent's one reader (launcher/backends/agent/reader.py). ssh's own messages on
stderr go into every running task's output; when ssh itself fails under running tasks,
their output ends with the line of a lost host.
"""

from __future__ import annotations

import signal
import subprocess
import threading
import time

from launcher.backends.agent.reader import AgentHandle, AgentLink
from launcher.plan import TaskPlan
from orchestrator.policies import HOST_LOST

KILL_LOCAL_AFTER = 3.0        # after SIGKILL: end the local ssh if the remote is silent


class SSHHandle(AgentHandle):
    """One task in its host's session: its output (a pipe that session fills), its exit
    status, and signals by control line."""

    link: HostSession

    def __init__(self, link: AgentLink, key: str, task: TaskPlan):
        super().__init__(link, key, task)
        self.given_up = False        # SIGKILL had no effect on a host that still answers

    @property
    def session(self) -> HostSession:
        return self.link

    def poll(self) -> int | None:
        if self.exit is not None:
            return self.exit
        if self.given_up:
            return -signal.SIGKILL
        code = self.session.ended()
        if code is None:
            return None
        if self.exit is None and self.remote_pid is None and code in (126, 127) and \
                self.start_failure is None:
            said = self.session.said[-1] if self.session.said else "no message"
            self.start_failure = (f"{self.task.name}: cannot start the bootstrap's Python on "
                                  f"{self.session.host}: the remote shell said (exit status "
                                  f"{code}): {said}")
        return self.exit if self.exit is not None else code

    def signal(self, sig: int) -> None:
        if self.poll() is not None:
            return
        sent = time.monotonic()
        self.session.signal(self.id, sig)
        if sig == signal.SIGKILL:
            self.session.send(b"0\n")     # answered at once by a host that is there
            timer = threading.Timer(KILL_LOCAL_AFTER, self._after_kill, args=(sent,))
            timer.daemon = True
            timer.start()

    def _after_kill(self, sent: float) -> None:
        """Still running, KILL_LOCAL_AFTER s after SIGKILL: when the host said nothing since
        (not even to the sign of life sent with it), end the local ssh (the agent there
        ends what it runs); else the task cannot be killed there: given up here."""
        if self.poll() is not None:
            return
        if self.session.last_heard < sent:
            self.session.kill()
        else:
            self.given_up = True
            self.session.drop(self.id)

    @property
    def pid(self) -> int | None:
        return self.session.proc.pid


class HostSession(AgentLink):
    """The agent on one host, through ssh (``argv``: the ssh command line)."""

    handle_class = SSHHandle

    def __init__(self, host: str, argv: list[str]):
        self.host = host
        super().__init__(argv, name=f"ssh-{host}")

    @property
    def alive(self) -> bool:
        return self.proc.poll() is None

    @property
    def running(self) -> bool:
        """Tasks were started in it."""
        return bool(self.handles)

    def heard(self, line: bytes) -> None:
        """ssh's own messages (and the remote shell's) go into every running task's output."""
        self.to_all(line)

    def last_words(self) -> tuple[bytes | None, int | None]:
        """When ssh itself failed (exit status 255: the host stopped answering, its
        keepalive timed out) under running tasks: the line their output ends with, a
        loss the restart policies retry (orchestrator.policies.TRANSIENT_ERRORS)."""
        try:
            code = self.proc.wait(timeout=5)
        except subprocess.TimeoutExpired:
            return None, None
        if code != 255 or not self.handles:
            return None, None
        self._errors.join(2)
        why = self.said[-1] if self.said else "ssh exited with status 255"
        return f"{HOST_LOST}{self.host} ({why})\n".encode(), None

    def drop(self, task_id: str) -> None:
        """Stop routing output to a task given up here; its output ends."""
        with self._route:
            handle = self.handles.pop(task_id, None)
            if handle is not None:
                handle.relay.close()

    def heartbeat(self) -> None:
        """A sign of life for the agent (control line 0), which answers it."""
        if self.running and self.alive:
            self.send(b"0\n")

    def kill(self) -> None:
        """End the local ssh (the host no longer answers); the agent there ends its tasks
        when it sees its stdin end, or hears nothing for ``silence`` s."""
        if self.alive:
            self.proc.kill()

    def ended(self, timeout: float = 5.0) -> int | None:
        """ssh's exit status once it ended and its output was read to the end, else None."""
        code = self.proc.poll()
        if code is None:
            return None
        for thread in (self._demux, self._errors):
            thread.join(timeout)
        return code

    def discard(self, timeout: float = 5.0) -> None:
        """End a session (it runs nothing, or its tasks are done): close it, wait for ssh."""
        self.close_stdin()
        try:
            self.proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        self.ended()
        self._stdout.close()
