"""Stopping a server a test bed started in a session of its own (``start_new_session``):
SIGTERM to its process group, SIGKILL after ``grace`` s."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess


def stop_group(proc: subprocess.Popen, grace: float = 10.0) -> None:
    """End ``proc`` and its process group (once; a no-op for one that ended)."""
    if proc.poll() is not None:
        return
    with contextlib.suppress(ProcessLookupError):
        os.killpg(proc.pid, signal.SIGTERM)
    try:
        proc.wait(grace)
    except subprocess.TimeoutExpired:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(10)
