"""The signals that stop a run, and the one rule for catching them.

SIGTERM always stops a run cleanly; while training runs it is a preemption notice (the
chief saves first: launcher/ending.py) and the run ends with ``PREEMPTED``. SIGINT
and SIGHUP stop it at once, unless the launcher was started with them ignored: `nohup
launch ...` ignores SIGHUP, so the run outlives the terminal and the logout; a background
job of a script (`launch ... &`) ignores SIGINT, so a Ctrl-C meant for the foreground does
not reach it. An inherited SIG_IGN is kept.
"""

from __future__ import annotations

import contextlib
import signal
import threading
from collections.abc import Callable, Iterator
from typing import Any

STOPPING = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)
# The exit status of a run stopped by a preemption notice (SIGTERM while training runs,
# launcher/ending.py): EX_TEMPFAIL, run it again and it resumes.
PREEMPTED = 75


def catch(handler: Callable[[int, Any], Any],
          signals: tuple[int, ...] = STOPPING) -> dict[int, Any]:
    """Install ``handler`` for each of ``signals`` not ignored (SIGTERM always); the
    handlers it replaced, for ``restore``."""
    previous = {}
    for sig in signals:
        if sig != signal.SIGTERM and signal.getsignal(sig) is signal.SIG_IGN:
            continue
        previous[sig] = signal.signal(sig, handler)
    return previous


def restore(previous: dict[int, Any]) -> None:
    for sig, old in previous.items():
        signal.signal(sig, old)


@contextlib.contextmanager
def held(*signals: int) -> Iterator[None]:
    """``signals`` that come inside the block are delivered after it (main thread only)."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    old = signal.pthread_sigmask(signal.SIG_BLOCK, signals)
    try:
        yield
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, old)
