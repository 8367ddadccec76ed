"""A task's output read as it comes (launcher/output/task_output.py): whole lines, and a
Keras bar redrawn with \\b and \\r shown at a steady pace, not once per epoch."""

from __future__ import annotations

import io

from launcher.output.noise import latest_state
from launcher.output.task_output import pump


class Chunks(io.RawIOBase):
    """A pipe that hands out the chunks a process wrote, one ``read1`` each, while a clock
    moves ``secs`` per chunk."""

    def __init__(self, chunks: list[bytes], clock: list[float], secs: float):
        self.chunks, self.clock, self.secs = list(chunks), clock, secs

    def read1(self, n: int = -1) -> bytes:
        if not self.chunks:
            return b""
        self.clock[0] += self.secs
        return self.chunks.pop(0)


def keras_epoch(steps: int) -> list[bytes]:
    """What tf_keras' Progbar writes to a pipe for one epoch: a redraw per step (backspaces
    over the previous state, a carriage return, the new state), a newline at the end."""
    out, previous = [], 0
    for step in range(1, steps + 1):
        state = f"{step}/{steps} [{'=' * step}{'.' * (steps - step)}] - loss: 0.{step:02d}"
        out.append(b"\b" * previous + b"\r" + state.encode())
        previous = len(state)
    out[-1] += b"\n"
    return out


def read(chunks: list[bytes], secs: float) -> tuple[list[tuple[str, bool]], bytes]:
    clock = [0.0]
    lines: list[tuple[str, bool]] = []
    logged = bytearray()
    pump(Chunks(chunks, clock, secs), logged.extend,
         lambda text, partial: lines.append((text, partial)), clock=lambda: clock[0],
         every=3.0)
    return lines, bytes(logged)


def test_a_keras_bar_is_shown_every_few_seconds_and_its_line_once_at_the_end():
    chunks = keras_epoch(40)                          # one step a second
    lines, logged = read(chunks, secs=1.0)
    partial = [text for text, is_partial in lines if is_partial]
    assert len(partial) == 13                         # every 3 s of a 40 s epoch
    assert partial[0].startswith("3/40 [===.....") and "\b" not in partial[0]
    whole = [text for text, is_partial in lines if not is_partial]
    assert len(whole) == 1 and latest_state(whole[0]) == \
        "40/40 [========================================] - loss: 0.40"   # once, at the end
    assert logged == b"".join(chunks)                 # the log gets every byte as it came


def test_whole_lines_come_as_they_are_written_across_chunks():
    lines, _ = read([b"first li", b"ne\nsecond\nthi", b"rd"], secs=10.0)
    assert lines == [("first line", False), ("second", False), ("third", False)]


def test_a_fast_epoch_shows_no_partial_state():
    lines, _ = read(keras_epoch(20), secs=0.01)
    assert [p for _, p in lines] == [False]


def test_a_stream_without_read1_is_read_line_by_line():
    lines = []
    pump(io.BytesIO(b"a\nb\n"), lambda b: None, lambda t, p: lines.append((t, p)))
    assert lines == [("a", False), ("b", False)]


def test_an_exec_watch_passes_chunks_on():
    """A backend whose tasks start through another program (slurmstepd, docker's init)
    wraps the task's output to spot that program's exec failure in its first lines; the bar
    still comes through as it is drawn, and the failure is still seen."""
    import types

    from launcher.backends.base import ExecWatch
    from launcher.backends.slurm import STEPD_EXEC_FAILED

    clock = [0.0]
    handle = types.SimpleNamespace(start_failure=None)
    watch = ExecWatch(Chunks(keras_epoch(40), clock, 1.0), handle, STEPD_EXEC_FAILED,
                      lambda program, reason: f"{program}: {reason}")
    lines = []
    pump(watch, lambda b: None, lambda t, p: lines.append(p), clock=lambda: clock[0])
    assert lines.count(True) == 13 and lines.count(False) == 1
    failed = ExecWatch(Chunks([b"slurmstepd: error: execve(): trian: No such file or "
                               b"directory\n"], clock, 1.0), handle, STEPD_EXEC_FAILED,
                       lambda program, reason: f"{program}: {reason}")
    pump(failed, lambda b: None, lambda t, p: None)
    assert handle.start_failure == "trian: No such file or directory"
