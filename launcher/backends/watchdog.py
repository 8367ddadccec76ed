"""A watchdog process that ends a job's tasks when the launcher dies, even by SIGKILL.

PR_SET_PDEATHSIG (set on every local task) only reaches the task's own process, not the
children it started (a shell wrapper's python, a data loader). The watchdog is a tiny
process that holds the read end of a pipe whose only write end the launcher holds; the
launcher tells it each task's process group (``+PGID`` / ``-PGID`` lines). When the pipe
closes (the launcher exited or was killed: the kernel closes its end either way), the
watchdog sends SIGTERM to every group still registered, SIGKILL to what is left after a
grace period, and exits.

A launcher may also leave commands to run at that moment (``!["scancel", "12"]``, a JSON
argv; ``~`` forgets them): that is how a Slurm allocation is released when the launcher
that holds it is killed.

Run as ``python -m launcher.backends.watchdog GRACE``; use ``Watchdog`` from the launcher side.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time

GRACE = 3.0
TREE = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
COMMAND_TIMEOUT = 30.0   # seconds for each at_exit command


class Watchdog:
    """Launcher side: start the watchdog process, register and forget process groups."""

    def __init__(self, grace: float = GRACE):
        read_end, self._write_end = os.pipe()
        try:
            # -S -E: no site-packages, no PYTHON* variables (it needs the standard library
            # only): a third of a Python's start; the launcher's own tree found from cwd
            self.proc = subprocess.Popen(
                [sys.executable, "-S", "-E", "-m", "launcher.backends.watchdog", str(grace)],
                stdin=read_end, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                start_new_session=True, cwd=TREE,
            )
        finally:
            os.close(read_end)

    def _send(self, line: str) -> None:
        if self._write_end < 0:
            return
        try:
            os.write(self._write_end, line.encode())
        except OSError:        # the watchdog is gone: PR_SET_PDEATHSIG still covers tasks
            pass

    def watch(self, pgid: int) -> None:
        self._send(f"+{pgid}\n")

    def forget(self, pgid: int) -> None:
        self._send(f"-{pgid}\n")

    def at_exit(self, argv: list[str]) -> None:
        """Run ``argv`` when the launcher is gone (after the groups were ended)."""
        self._send("!" + json.dumps(argv) + "\n")

    def clear_at_exit(self) -> None:
        """Forget the commands given to ``at_exit`` (the launcher did the work itself)."""
        self._send("~\n")

    def close(self) -> None:
        """Normal end: the watchdog ends whatever is still registered, then exits."""
        if self._write_end >= 0:
            os.close(self._write_end)
            self._write_end = -1
        try:
            self.proc.wait(timeout=GRACE + 5)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()


def _alive(pgid: int) -> bool:
    """A process of the group is still running (zombies waiting for a reaper do not count)."""
    if not os.path.isdir("/proc/self"):
        try:
            os.killpg(pgid, 0)
        except ProcessLookupError:
            return False
        return True
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat", encoding="ascii", errors="replace") as f:
                fields = f.read().rsplit(")", 1)[1].split()
        except (OSError, IndexError):
            continue
        if fields[0] != "Z" and int(fields[2]) == pgid:
            return True
    return False


def _signal_all(groups: set[int], sig: int) -> None:
    for pgid in groups:
        try:
            os.killpg(pgid, sig)
        except (ProcessLookupError, PermissionError):
            pass


def end_groups(groups: set[int], grace: float) -> None:
    """SIGTERM every group, SIGKILL those still alive after ``grace`` seconds."""
    _signal_all(groups, signal.SIGTERM)
    deadline = time.monotonic() + grace
    while any(_alive(g) for g in groups) and time.monotonic() < deadline:
        time.sleep(0.05)
    _signal_all({g for g in groups if _alive(g)}, signal.SIGKILL)


def main(argv: list[str]) -> int:
    for sig in (signal.SIGINT, signal.SIGHUP):
        signal.signal(sig, signal.SIG_IGN)
    grace = float(argv[0]) if argv else GRACE
    groups: set[int] = set()
    commands: list[list[str]] = []
    for raw in sys.stdin.buffer:            # blocks until a line or EOF (launcher gone)
        line = raw.strip()
        if line[:1] == b"!":
            try:
                commands.append([str(a) for a in json.loads(line[1:])])
            except ValueError:
                pass
        elif line == b"~":
            commands.clear()
        elif len(line) > 1 and line[1:].isdigit() and int(line[1:]) > 1:
            (groups.add if line[:1] == b"+" else groups.discard)(int(line[1:]))
    end_groups(groups, grace)
    for argv in commands:
        try:
            subprocess.run(argv, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                           stderr=subprocess.DEVNULL, timeout=COMMAND_TIMEOUT)
        except (OSError, subprocess.TimeoutExpired):
            pass
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
