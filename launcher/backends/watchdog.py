"""A watchdog process that ends a job's tasks when the launcher dies, even by SIGKILL.

The watchdog is a tiny process that holds the read end of a pipe whose only write end the
launcher holds; the launcher tells it each task's process group (``+PGID`` / ``-PGID``
lines), and ``.`` before a normal end. When the pipe closes (the launcher exited or was
killed: the kernel closes its end either way), the watchdog sends SIGTERM to every group
still registered, SIGKILL to what is left after a grace period, and exits.

Given the run's marker (``TFCLUSTER_RUN_ID=<run id>``, in every task's environment), it
also ends every process on this machine that carries it and started before the launcher
died: a task started in the instant the launcher was killed, before its group was
registered, and whatever a task started in a session of its own (a daemonized data
loader). That is what ``setpriv --pdeathsig`` in front of each local task covered before,
at the cost of an exec per task (launcher/backends/processes.py).

A launcher may also leave commands to run at that moment (``!["scancel", "12"]``, a JSON
argv; ``~`` forgets them): that is how a Slurm allocation is released when the launcher
that holds it is killed.

Run as ``python -I -S .../launcher/backends/watchdog.py GRACE [MARKER]`` (the standard
library only: no site-packages, no package around it); use ``Watchdog`` from the launcher
side.
"""

from __future__ import annotations

import os
import signal
import sys
import time

# The watchdog's own process imports only what its common path needs (json and subprocess
# are for the commands left with at_exit): it starts beside the job's first tasks.
TYPE_CHECKING = False
if TYPE_CHECKING:
    import subprocess
    from collections.abc import Callable

GRACE = 3.0
COMMAND_TIMEOUT = 30.0   # seconds for each at_exit command


class Watchdog:
    """Launcher side: start the watchdog process, register and forget process groups."""

    def __init__(self, grace: float = GRACE, marker: str | None = None):
        """``marker``: ``NAME=VALUE`` in the environment of every process of the run."""
        import subprocess

        read_end, self._write_end = os.pipe()
        try:
            # -I -S: no site-packages, no PYTHON* variables, nothing of the launcher's
            # package (it needs the standard library only): ~29 ms a start against ~44 as
            # a module of the package (docs/benchmarks.md)
            self.proc = subprocess.Popen(
                [sys.executable, "-I", "-S", os.path.abspath(__file__), str(grace),
                 *([marker] if marker else [])],
                stdin=read_end, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                start_new_session=True, cwd="/",
            )
        finally:
            os.close(read_end)

    def _send(self, line: str) -> None:
        if self._write_end < 0:
            return
        try:
            os.write(self._write_end, line.encode())
        except OSError:        # the watchdog is gone (killed with the launcher)
            pass

    def watch(self, pgid: int) -> None:
        self._send(f"+{pgid}\n")

    def forget(self, pgid: int) -> None:
        self._send(f"-{pgid}\n")

    def at_exit(self, argv: list[str]) -> None:
        """Run ``argv`` when the launcher is gone (after the groups were ended)."""
        import json

        self._send("!" + json.dumps(argv) + "\n")

    def clear_at_exit(self) -> None:
        """Forget the commands given to ``at_exit`` (the launcher did the work itself)."""
        self._send("~\n")

    def close(self, ended: bool = True) -> None:
        """The watchdog ends whatever is still registered, then exits. ``ended``: the
        launcher stopped its tasks itself (False: as when it dies)."""
        if ended:
            self._send(".\n")
        if self._write_end >= 0:
            os.close(self._write_end)
            self._write_end = -1
        try:
            self.proc.wait(timeout=GRACE + 5)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()


def _processes() -> list[tuple[int, int, float]] | None:
    """(pid, process group, start in seconds since boot) of every live process (zombies
    waiting for a reaper do not count); None without /proc."""
    if not os.path.isdir("/proc/self"):
        return None
    tick = os.sysconf("SC_CLK_TCK")
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat", encoding="ascii", errors="replace") as f:
                fields = f.read().rsplit(")", 1)[1].split()
            if fields[0] != "Z":
                found.append((int(entry), int(fields[2]), int(fields[19]) / tick))
        except (OSError, IndexError, ValueError):
            continue
    return found


def _living(groups: set[int], pids: set[int]) -> tuple[set[int], set[int]]:
    """Those of ``groups`` that still have a process, and those of ``pids`` still alive:
    one pass over /proc (or a signal 0 to each, without it)."""
    processes = _processes()
    if processes is None:
        return {g for g in groups if _answers(os.killpg, g)}, \
            {p for p in pids if _answers(os.kill, p)}
    return {g for _, g, _ in processes if g in groups}, \
        {p for p, _, _ in processes if p in pids}


def _answers(send: Callable[[int, int], None], target: int) -> bool:
    try:
        send(target, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        pass
    return True


def carrying(marker: str, after: float, before: float) -> set[int]:
    """The processes whose environment holds ``marker`` and that started between ``after``
    and ``before`` (seconds since boot), this one aside."""
    wanted, me = marker.encode(), os.getpid()
    found = set()
    for pid, _, started in _processes() or []:
        if pid == me or not after <= started <= before:
            continue
        try:
            with open(f"/proc/{pid}/environ", "rb") as f:
                if wanted in f.read().split(b"\0"):
                    found.add(pid)
        except OSError:
            continue
    return found


def _started() -> float:
    """When this process started, in seconds since boot (0 without /proc)."""
    try:
        with open("/proc/self/stat", encoding="ascii", errors="replace") as f:
            return int(f.read().rsplit(")", 1)[1].split()[19]) / os.sysconf("SC_CLK_TCK")
    except (OSError, IndexError, ValueError):
        return 0.0


def _uptime() -> float:
    try:
        with open("/proc/uptime", encoding="ascii") as f:
            return float(f.read().split()[0])
    except (OSError, ValueError, IndexError):
        return float("inf")


def _signal_all(groups: set[int], pids: set[int], sig: int) -> None:
    for send, targets in ((os.killpg, groups), (os.kill, pids)):
        for target in targets:
            try:
                send(target, sig)
            except (ProcessLookupError, PermissionError):
                pass


def end_groups(groups: set[int], grace: float, marker: str | None = None,
               died: bool = True) -> None:
    """SIGTERM every group (and, with ``marker``, every process carrying it that started
    since this watchdog did), SIGKILL what is still alive after ``grace`` seconds. When the
    launcher ``died``, those carrying the marker are looked for once more before the
    SIGKILL: one whose exec was under way the first time."""
    now = _uptime() + 0.01          # /proc/PID/stat counts in ticks of 10 ms
    born = _started() - 0.01        # this watchdog started before the launcher's first task
    pids = carrying(marker, born, now) if marker else set()
    if not (groups or pids or died):
        return                      # the launcher ended every task itself
    _signal_all(groups, pids, signal.SIGTERM)
    deadline = time.monotonic() + grace
    while any(_living(groups, pids)) and time.monotonic() < deadline:
        time.sleep(0.05)
    if marker and died:
        pids |= carrying(marker, born, now)
    _signal_all(*_living(groups, pids), signal.SIGKILL)


def main(argv: list[str]) -> int:
    for sig in (signal.SIGINT, signal.SIGHUP):
        signal.signal(sig, signal.SIG_IGN)
    grace = float(argv[0]) if argv else GRACE
    marker = argv[1] if len(argv) > 1 else None
    groups: set[int] = set()
    commands: list[list[str]] = []
    ended = False                           # the launcher said it ends normally
    for raw in sys.stdin.buffer:            # blocks until a line or EOF (launcher gone)
        line = raw.strip()
        if line == b".":
            ended = True
        elif line[:1] == b"!":
            import json

            try:
                commands.append([str(a) for a in json.loads(line[1:])])
            except ValueError:
                pass
        elif line == b"~":
            commands.clear()
        elif len(line) > 1 and line[1:].isdigit() and int(line[1:]) > 1:
            (groups.add if line[:1] == b"+" else groups.discard)(int(line[1:]))
    end_groups(groups, grace, marker, died=not ended)
    if commands:
        import subprocess
    for argv in commands:
        try:
            subprocess.run(argv, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                           stderr=subprocess.DEVNULL, timeout=COMMAND_TIMEOUT)
        except (OSError, subprocess.TimeoutExpired):
            pass
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
