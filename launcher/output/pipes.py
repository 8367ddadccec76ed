"""A closed stdout is not an error: ``launch … | head`` ends quietly.

When the reader of a pipe goes away, the next write raises BrokenPipeError. ``discard``
points the stream's file descriptor at /dev/null, so later writes (and the interpreter's
final flush) succeed and go nowhere; ``write`` does that for the console, whose job goes
on (its progress still reaches stderr, every task's output is still in its log).
"""

from __future__ import annotations

import os
import sys
from typing import IO


def discard(stream: IO[str] | None = None) -> None:
    """From now on ``stream`` (default: stdout) writes into /dev/null."""
    stream = stream or sys.stdout
    try:
        fd = stream.fileno()
    except (AttributeError, OSError, ValueError):
        return              # not a file (a StringIO in a test): nothing to redirect
    devnull = os.open(os.devnull, os.O_WRONLY)
    try:
        os.dup2(devnull, fd)
    finally:
        os.close(devnull)


def write(stream: IO[str], text: str) -> bool:
    """Write and flush ``text``; False, and the stream discarded, when its reader is gone."""
    try:
        stream.write(text)
        stream.flush()
        return True
    except BrokenPipeError:
        discard(stream)
        return False


def flush_stdout() -> None:
    """Flush stdout now, inside the command (so a closed pipe raises BrokenPipeError where
    the caller catches it, not in the interpreter's exit)."""
    sys.stdout.flush()
