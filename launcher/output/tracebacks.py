"""The exception in a failed task's output, however long what came after it.

A TensorFlow task that fails often ends with hundreds of lines after the line that matters
(a tensor dump in the message, C++ log lines, a second traceback "during handling").
``last_exception`` finds, in the whole log, the last Python traceback and its exception
line; the job loop shows that line, where the traceback starts and the innermost frame of
the user's own code (not TensorFlow's: a frame in site-packages, dist-packages or the Python
standard library is a library's), then the log's last lines without TensorFlow's banners.
"""

from __future__ import annotations

import dataclasses
import os
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from launcher.output.noise import is_banner

TRACEBACK = "Traceback (most recent call last):"
# "ValueError: ...", "tensorflow.python.framework.errors_impl.NotFoundError: ...", "KeyError"
_EXCEPTION = re.compile(r"^(?:[A-Za-z_][\w]*\.)*[A-Za-z_]\w*(?:Error|Exception|Exit|Interrupt|"
                        r"Warning|Failure)\b(?::.*)?$")
_FRAME = re.compile(r'^\s+File "(?P<file>[^"]+)", line (?P<line>\d+), in (?P<func>.+)$')
# a library's file: installed packages, the standard library (lib/python3.11/...), frozen
_LIBRARY = re.compile(r"[/\\](site|dist)-packages[/\\]|[/\\]lib(64)?[/\\]python\d+(\.\d+)?[/\\]|"
                      r"^<frozen ")
LOG_READ_BYTES = 4 << 20       # the end of a log that is searched


@dataclass(frozen=True)
class Excerpt:
    """Where a task's traceback is in its log, and what it says."""

    exception: str              # "ValueError: shapes (3,) and (4,) not aligned"
    traceback_line: int         # 1-based line of "Traceback (most recent call last):"
    frame: str | None = None    # the user's innermost frame: 'train.py, line 42, in input_fn'
    first_line: int = 1         # line number of lines[0] in the log
    chain: tuple[str, ...] = ()  # the exception lines of the whole chain, causes first
    library_frame: str | None = None    # the innermost frame, when a library's (TF's)
    frames: tuple[str, ...] = ()  # every frame, outermost first: 'train.py, line 42, in f'

    @property
    def raised_in(self) -> str | None:
        """Where it was raised, for a person: the user's frame, then TensorFlow's."""
        if self.frame is None or self.library_frame is None:
            return self.frame or self.library_frame
        return f"{self.frame} (innermost: {self.library_frame})"


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
    return dataclasses.replace(found, chain=tuple(chain))


def _block(lines: Sequence[str], start: int, first_line: int) -> Excerpt | None:
    """The exception of the traceback that starts at ``lines[start]``."""
    frame = library = None
    frames: list[str] = []
    for i in range(start + 1, len(lines)):
        line = lines[i]
        m = _FRAME.match(_strip_prefix(line) if line.startswith("[") else line)
        if m:
            frames.append(f"{m['file']}, line {m['line']}, in {m['func']}")
            if _LIBRARY.search(m["file"]):
                library = f"{os.path.basename(m['file'])}, line {m['line']}, in {m['func']}"
            else:
                frame, library = f"{m['file']}, line {m['line']}, in {m['func']}", None
            continue
        if line.startswith((" ", "\t")) or not line.strip():
            continue            # source lines, ^^^ markers, blank lines inside the traceback
        text = _strip_prefix(line)
        if _EXCEPTION.match(text):
            return Excerpt(text, first_line + start, frame, first_line, library_frame=library,
                           frames=tuple(frames))
    return None


def _strip_prefix(line: str) -> str:
    """A line as the task printed it (without a "[task] " prefix some backends add)."""
    return re.sub(r"^\[[\w:-]+\] ", "", line).rstrip()


def tail_box(lines: Iterable[str], excerpt: Excerpt | None = None) -> list[str]:
    """A failed task's last lines as the failure tail shows them: without TensorFlow's
    start-up banners (oneDNN, CPU features, CUDA, absl's), which say nothing of the error.
    When they are data (a tensor's values dumped in the exception's message) and the
    traceback is known, its frames and exception line instead."""
    kept = [line for line in lines if not is_banner(line)]
    data = sum(1 for line in kept if is_data(line))
    if excerpt is None or not excerpt.frames or data < max(DATA_RUN, len(kept) // 2):
        return kept
    first = excerpt.exception
    if len(first) > DATA_LINE_MAX:
        first = first[:DATA_LINE_MAX - 1] + "…"
    return [TRACEBACK, *(f"  File {frame}" for frame in excerpt.frames), first,
            f"({data} of the last {len(kept)} lines are data: a tensor's values)"]


# A line of a tensor's or an array's values: numbers, brackets, commas, and the words
# around them ("<tf.Tensor: shape=(16, 8), dtype=float32, numpy=", "array([", "dtype=...").
_DATA_WORDS = re.compile(r"<tf\.Tensor:.*?numpy=|array\(|dtype=\w+|\)>|\.\.\.|\bnan\b|"
                         r"\binf\b|\bTrue\b|\bFalse\b|^\[[\w:-]+\] ")
_NUMBERS = re.compile(r"^[\s\[\](){},.:;0-9eE+\-]*$")
DATA_RUN = 4            # data lines in a row folded into one line
DATA_LINE_MAX = 240     # characters of an exception line shown beside data


def is_data(line: str) -> bool:
    """Whether ``line`` is part of a tensor's or array's values printed in full."""
    return any(c.isdigit() for c in line) and bool(_NUMBERS.match(_DATA_WORDS.sub(" ", line)))


def fold_data(lines: Sequence[str], where: str) -> list[str]:
    """``lines`` with each run of DATA_RUN or more data lines folded into one line that
    says how many there were and ``where`` they are (the task's log)."""
    out: list[str] = []
    run: list[str] = []
    for line in [*lines, ""]:
        if line and is_data(line):
            run.append(line)
            continue
        if len(run) >= DATA_RUN:
            out.append(f"  … {len(run)} lines of data (a tensor's values): {where}")
        else:
            out += run
        run = []
        out.append(line)
    return out[:-1]


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
