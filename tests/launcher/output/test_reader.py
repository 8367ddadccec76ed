"""One thread reads every task's output (launcher/output/reader.py): when many tasks print
at once, each stream's bytes and lines come complete, in order, to its own callbacks, and
``done`` comes once, after its last line."""

from __future__ import annotations

import io
import os
import threading

from launcher.output.reader import READER

STREAMS = 64
LINES = 200


def test_many_pipes_printing_at_once_each_keep_their_own_complete_output():
    got: dict[int, dict] = {}
    ended: list[int] = []
    finished = threading.Event()
    writers = []
    for i in range(STREAMS):
        read_end, write_end = os.pipe()
        mine: dict = {"raw": bytearray(), "lines": [], "done": 0, "lines_at_done": None}
        got[i] = mine

        def done(mine=mine, i=i) -> None:
            mine["done"] += 1
            mine["lines_at_done"] = len(mine["lines"])
            ended.append(i)
            if len(ended) == STREAMS:
                finished.set()

        READER.add(os.fdopen(read_end, "rb"), mine["raw"].extend,
                   lambda text, partial, mine=mine: mine["lines"].append(text), done)

        def write(i=i, fd=write_end) -> None:
            with os.fdopen(fd, "wb", buffering=0) as out:
                for n in range(LINES):
                    out.write(f"stream {i} line {n}\n".encode())
                out.write(f"stream {i} unfinished".encode())
        writers.append(threading.Thread(target=write))
    for w in writers:
        w.start()
    for w in writers:
        w.join()
    assert finished.wait(30)    # every stream's done() came
    for i, mine in got.items():
        expected = [f"stream {i} line {n}" for n in range(LINES)] + [f"stream {i} unfinished"]
        assert mine["lines"] == expected
        assert bytes(mine["raw"]) == "".join(f"{line}\n" for line in expected).encode()[:-1]
        assert mine["done"] == 1 and mine["lines_at_done"] == LINES + 1


def test_a_stream_without_a_descriptor_is_read_to_its_end_too():
    lines: list[str] = []
    ended = threading.Event()
    READER.add(io.BytesIO(b"one\ntwo\nthree"), lambda data: None,
               lambda text, partial: lines.append(text), ended.set)
    assert ended.wait(10)
    assert lines == ["one", "two", "three"]
