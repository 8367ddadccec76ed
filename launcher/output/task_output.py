"""Reading a task's output as it comes: whole lines, and the latest state of a progress bar
redrawn in place.

Keras' ``Model.fit`` (``verbose=1``) redraws its bar with ``\\b`` and ``\\r`` and writes a
newline only at the end of an epoch: a reader of whole lines shows it once per epoch. So
the output is read in chunks as they arrive (``read1``); every byte goes to the task's log
at once, each whole line is handed on, and while a line is pending that redraws itself, its
latest state is handed on at most every ``BAR_EVERY`` seconds (marked ``partial``). The
whole line still comes when it ends (its last state is what the console shows of it).
"""

from __future__ import annotations

import time
from typing import Callable, Protocol

from launcher.output.noise import latest_state

BAR_EVERY = 3.0          # s between two states of a bar being redrawn
CHUNK = 65536
PENDING_MAX = 1 << 16    # bytes of a line being redrawn kept (its last redraw is enough)
REDRAW = (b"\r", b"\b")


class Lines(Protocol):
    """What ``pump`` reads: bytes by lines, and as they arrive where it has ``read1``."""

    def readline(self) -> bytes: ...


def pump(stream: Lines, raw: Callable[[bytes], None],
         line: Callable[[str, bool], None], clock: Callable[[], float] = time.monotonic,
         every: float = BAR_EVERY) -> None:
    """Read ``stream`` to its end: ``raw(bytes)`` for everything read, ``line(text,
    partial)`` for each whole line (``partial`` False) and for a bar's latest state
    (``partial`` True). A stream without ``read1`` is read line by line."""
    read1 = getattr(stream, "read1", None)
    if read1 is None:
        for chunk in iter(stream.readline, b""):
            raw(chunk)
            line(decode(chunk), False)
        return
    pending = b""
    shown_at = clock()
    while True:
        chunk = read1(CHUNK)
        if not chunk:
            break
        raw(chunk)
        pending += chunk
        *whole, pending = pending.split(b"\n")
        for done in whole:
            line(decode(done), False)
        if whole:
            shown_at = clock()
        if any(c in pending for c in REDRAW):
            if len(pending) > PENDING_MAX:
                pending = pending[pending.rfind(b"\r"):]
            now = clock()
            if now - shown_at >= every:
                state = latest_state(decode(pending))
                if state.strip():
                    line(state, True)
                    shown_at = now
    if pending:
        line(decode(pending), False)


def decode(data: bytes) -> str:
    return data.decode(errors="replace").rstrip("\r\n")
