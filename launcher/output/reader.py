"""One thread reads the output of every task: a selector over their pipes.

A thread per task cost a thread start on every task's start (a sixth of it at 400 tasks,
docs/benchmarks.md, "Scale") and hundreds of threads asleep in ``read``. Here each stream
is registered with ``READER.add``; the reader thread reads whatever is ready as it comes
(``read1``: one read of what the pipe holds) and feeds it to the stream's ``LineSplitter``
(launcher/output/task_output.py), so a task's log, tail and console lines are what a
thread of its own would have made of them. At the end of a stream (or when reading it
fails) its last, unfinished line is handed on, then ``done()`` is called: everything the
task wrote before its pipe closed has been read by then.

A stream that cannot be selected (no file descriptor, or no ``read1``: the in-memory
backend's) is read by a thread of its own, as before.
"""

from __future__ import annotations

import os
import selectors
import threading
import time
from dataclasses import dataclass
from typing import Any, Callable

from launcher.output.task_output import CHUNK, LineSplitter, pump


@dataclass
class Reading:
    """One stream being read."""

    stream: Any
    splitter: LineSplitter
    done: Callable[[], None]


def selectable(stream: Any) -> int | None:
    """The stream's file descriptor when the reader thread can read it, else None."""
    if getattr(stream, "read1", None) is None:
        return None
    try:
        fd = stream.fileno()
    except (AttributeError, OSError, ValueError):
        return None
    return fd if isinstance(fd, int) and fd >= 0 else None


class OutputReader:
    """The reader thread (started with the first stream; it lives as long as the process)."""

    def __init__(self) -> None:
        self._selector: selectors.BaseSelector | None = None
        self._added: list[tuple[int, Reading]] = []
        self._lock = threading.Lock()
        self._wake_r = self._wake_w = -1

    def add(self, stream: Any, raw: Callable[[bytes], None],
            line: Callable[[str, bool], None], done: Callable[[], None],
            clock: Callable[[], float] = time.monotonic) -> None:
        """Read ``stream`` to its end: ``raw`` and ``line`` as ``pump`` calls them, then
        ``done()`` (also when reading fails). Returns at once."""
        fd = selectable(stream)
        if fd is None:
            threading.Thread(target=self._pump, args=(stream, raw, line, done, clock),
                             name="output", daemon=True).start()
            return
        reading = Reading(stream, LineSplitter(raw, line, clock), done)
        with self._lock:
            if self._selector is None:
                self._selector = selectors.DefaultSelector()
                self._wake_r, self._wake_w = os.pipe()
                os.set_blocking(self._wake_r, False)
                self._selector.register(self._wake_r, selectors.EVENT_READ)
                threading.Thread(target=self._loop, args=(self._selector,),
                                 name="output-reader", daemon=True).start()
            self._added.append((fd, reading))
        os.write(self._wake_w, b"x")

    @staticmethod
    def _pump(stream: Any, raw: Callable[[bytes], None], line: Callable[[str, bool], None],
              done: Callable[[], None], clock: Callable[[], float]) -> None:
        try:
            pump(stream, raw, line, clock)
        except (OSError, ValueError):
            pass
        finally:
            done()

    def _loop(self, selector: selectors.BaseSelector) -> None:
        while True:
            for key, _ in selector.select():
                if key.fd == self._wake_r:
                    self._take_added(selector)
                else:
                    self._read(selector, key.fd, key.data)

    def _take_added(self, selector: selectors.BaseSelector) -> None:
        try:
            os.read(self._wake_r, 4096)
        except BlockingIOError:
            pass
        with self._lock:
            added, self._added = self._added, []
        for fd, reading in added:
            stale = selector.get_map().get(fd)
            if stale is not None:       # its stream was closed under it, the number reused
                self._end(selector, fd, stale.data)
            selector.register(fd, selectors.EVENT_READ, reading)

    def _read(self, selector: selectors.BaseSelector, fd: int, reading: Reading) -> None:
        try:
            chunk = reading.stream.read1(CHUNK)
            if chunk:
                reading.splitter.feed(chunk)
                return
        except Exception:   # noqa: BLE001 - as a thread of its own would: this stream ends
            pass
        self._end(selector, fd, reading)

    @staticmethod
    def _end(selector: selectors.BaseSelector, fd: int, reading: Reading) -> None:
        try:
            selector.unregister(fd)
        except (KeyError, ValueError):
            pass
        try:
            reading.splitter.end()
        except Exception:   # noqa: BLE001 - done() must come whatever happened
            pass
        try:
            reading.done()
        except Exception:   # noqa: BLE001 - the reader thread goes on for the others
            pass


READER = OutputReader()
