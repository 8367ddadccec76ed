"""The exception in a failed task's output, however long what came after it.

A TensorFlow task that fails often ends with hundreds of lines after the line that matters
(a tensor dump in the message, C++ log lines, a second traceback "during handling").
``last_exception`` finds, in the whole log, the last Python traceback and its exception
line; the job loop shows that line and where the traceback starts before the log's tail.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass

TRACEBACK = "Traceback (most recent call last):"
# "ValueError: ...", "tensorflow.python.framework.errors_impl.NotFoundError: ...", "KeyError"
_EXCEPTION = re.compile(r"^(?:[A-Za-z_][\w]*\.)*[A-Za-z_]\w*(?:Error|Exception|Exit|Interrupt|"
                        r"Warning|Failure)\b(?::.*)?$")
_FRAME = re.compile(r'^\s+File "(?P<file>[^"]+)", line (?P<line>\d+), in (?P<func>.+)$')
LOG_READ_BYTES = 4 << 20       # the end of a log that is searched


@dataclass(frozen=True)
class Excerpt:
    exception: str              # "ValueError: shapes (3,) and (4,) not aligned"
    traceback_line: int         # 1-based line of "Traceback (most recent call last):"
    frame: str | None = None    # the innermost frame: 'train.py, line 42, in input_fn'
    first_line: int = 1         # line number of lines[0] in the log
    chain: tuple[str, ...] = ()  # the exception lines of the whole chain, causes first


CHAINED = ("During handling of the above exception", "The above exception was the direct "
           "cause")


def last_exception(lines: Sequence[str], first_line: int = 1) -> Excerpt | None:
    """The last traceback of ``lines`` and its exception line; None when there is none.
    ``first_line`` is the log's line number of ``lines[0]`` (when only its end was read).
    ``chain`` also has the exception lines of the tracebacks it was raised from (TensorFlow
    wraps a missing file in "Restoring from checkpoint failed")."""
    starts = [i for i, line in enumerate(lines) if line.strip().endswith(TRACEBACK)]
    if not starts:
        return None
    found = _block(lines, starts[-1], first_line)
    if found is None:
        return None
    chain = [found.exception]
    for previous, start in zip(reversed(starts[:-1]), reversed(starts)):
        between = [x.strip() for x in lines[previous:start] if x.strip()]
        if not any(between[-1].startswith(c) for c in CHAINED) if between else True:
            break
        cause = _block(lines, previous, first_line)
        if cause is not None:
            chain.insert(0, cause.exception)
    return Excerpt(found.exception, found.traceback_line, found.frame, first_line,
                   tuple(chain))


def _block(lines: Sequence[str], start: int, first_line: int) -> Excerpt | None:
    """The exception of the traceback that starts at ``lines[start]``."""
    frame = None
    for i in range(start + 1, len(lines)):
        line = lines[i]
        m = _FRAME.match(line)
        if m:
            frame = f"{m['file']}, line {m['line']}, in {m['func']}"
            continue
        if line.startswith((" ", "\t")) or not line.strip():
            continue            # source lines, ^^^ markers, blank lines inside the traceback
        text = _strip_prefix(line)
        if _EXCEPTION.match(text):
            return Excerpt(text, first_line + start, frame, first_line)
    return None


def _strip_prefix(line: str) -> str:
    """A line as the task printed it (without a "[task] " prefix some backends add)."""
    return re.sub(r"^\[[\w:-]+\] ", "", line).rstrip()


def read_log_end(path: str, max_bytes: int = LOG_READ_BYTES) -> tuple[list[str], int]:
    """(the last lines of a log, the line number of the first one); ([], 1) without a log."""
    try:
        with open(path, "rb") as f:
            f.seek(0, 2)
            size = f.tell()
            start = max(0, size - max_bytes)
            skipped = 0
            if start:
                f.seek(0)
                remaining = start
                while remaining:               # count the lines that are not read
                    chunk = f.read(min(remaining, 1 << 20))
                    skipped += chunk.count(b"\n")
                    remaining -= len(chunk)
            f.seek(start)
            data = f.read()
    except OSError:
        return [], 1
    lines = data.decode("utf-8", "replace").splitlines()
    if start and lines:
        lines, skipped = lines[1:], skipped + 1     # the first line may be cut
    return lines, skipped + 1


def describe(path: str) -> Excerpt | None:
    """The last exception in the log file at ``path``."""
    lines, first = read_log_end(path)
    return last_exception(lines, first)
