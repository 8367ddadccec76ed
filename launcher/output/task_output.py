"""Reading a task's output as it comes: whole lines, and the latest state of a progress bar
redrawn in place.

Keras' ``Model.fit`` (``verbose=1``) redraws its bar with ``\\b`` and ``\\r`` and writes a
newline only at the end of an epoch: a reader of whole lines shows it once per epoch. So
the output is read in chunks as they arrive (``read1``); every byte goes to the task's log
at once, each whole line is handed on, and while a line is pending that redraws itself, its
latest state is handed on at most every ``BAR_EVERY`` seconds (marked ``partial``). The
whole line still comes when it ends (its last state is what the console shows of it).
``LineSplitter`` does this for chunks as they come (the output reader, launcher/output/
reader.py, feeds it from every task's pipe); ``pump`` reads one stream to its end with it.
"""

from __future__ import annotations

import functools
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


class LineSplitter:
    """One task's output, fed as its chunks arrive: ``raw(bytes)`` for every chunk,
    ``line(text, partial)`` for each whole line (``partial`` False) and for a bar's latest
    state at most every ``every`` s (``partial`` True); ``end()`` hands on the last,
    unfinished line."""

    def __init__(self, raw: Callable[[bytes], None], line: Callable[[str, bool], None],
                 clock: Callable[[], float] = time.monotonic, every: float = BAR_EVERY):
        self.raw, self.line, self.clock, self.every = raw, line, clock, every
        self.pending = b""
        self.shown_at = clock()

    def feed(self, chunk: bytes) -> None:
        self.raw(chunk)
        pending = self.pending + chunk
        *whole, pending = pending.split(b"\n")
        for done in whole:
            self.line(decode(done), False)
        if whole:
            self.shown_at = self.clock()
        if any(c in pending for c in REDRAW):
            if len(pending) > PENDING_MAX:
                pending = pending[pending.rfind(b"\r"):]
            now = self.clock()
            if now - self.shown_at >= self.every:
                state = latest_state(decode(pending))
                if state.strip():
                    self.line(state, True)
                    self.shown_at = now
        self.pending = pending

    def end(self) -> None:
        if self.pending:
            self.line(decode(self.pending), False)
            self.pending = b""


def pump(stream: Lines, raw: Callable[[bytes], None],
         line: Callable[[str, bool], None], clock: Callable[[], float] = time.monotonic,
         every: float = BAR_EVERY) -> None:
    """Read ``stream`` to its end through a ``LineSplitter``. A stream without ``read1`` is
    read line by line."""
    read1 = getattr(stream, "read1", None)
    if read1 is None:
        for chunk in iter(stream.readline, b""):
            raw(chunk)
            line(decode(chunk), False)
        return
    splitter = LineSplitter(raw, line, clock, every)
    for chunk in iter(functools.partial(read1, CHUNK), b""):
        splitter.feed(chunk)
    splitter.end()


def decode(data: bytes) -> str:
    return data.decode(errors="replace").rstrip("\r\n")
