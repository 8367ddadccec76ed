"""What the evaluator has evaluated, read from model_dir without TensorFlow.

Two traces, whichever the job leaves:
- TensorFlow's own evaluator (``train_and_evaluate``, ``Estimator.evaluate``) writes one
  events record per evaluation into ``eval*/events.out.tfevents.*`` (``eval/`` or
  ``eval_NAME/``), at the global step of the checkpoint it evaluated;
- orchestrator.evaluation writes a ``"split": "eval"`` line with that ``step`` into
  ``tfcluster_metrics.jsonl`` (the coordinator reads that one for the progress line).

``EvaluationFollower.poll()`` returns the newest step evaluated so far; it lists the eval
directories at most every ``relist`` seconds and otherwise reads only what the known
files gained (one ``info`` per file per poll).
"""

from __future__ import annotations

import time
from typing import Callable

from orchestrator.checkpoints import CheckpointReader
from orchestrator.tfformats import event_step, tfrecords

EVAL_EVENTS = "eval*/events.out.tfevents.*"
RELIST_SECS = 5.0


class EvaluationFollower:
    """Follows the eval events files of one model_dir (see the module docstring)."""

    def __init__(self, reader: CheckpointReader, relist: float = RELIST_SECS,
                 clock: Callable[[], float] = time.monotonic):
        self.reader = reader
        self.relist = relist
        self.clock = clock
        self._offsets: dict[str, int] = {}     # file -> bytes consumed
        self._listed = -1e18
        self.step: int | None = None

    def poll(self) -> int | None:
        """The newest global step evaluated (eval events), or None; never raises for a
        file that vanished."""
        fs = self.reader.fs
        now = self.clock()
        if now - self._listed >= self.relist or not self._offsets:
            self._listed = now
            try:
                for path in fs.glob(self.reader._path(EVAL_EVENTS)):
                    self._offsets.setdefault(path, 0)
            except (FileNotFoundError, NotADirectoryError):
                pass
        for path, offset in list(self._offsets.items()):
            try:
                size = int(fs.info(path).get("size") or 0)
                if size <= offset:
                    continue
                data = fs.cat_file(path, start=offset, end=size)
            except FileNotFoundError:
                del self._offsets[path]
                continue
            step, used, broken = newest_step(data)
            # Broken bytes: two processes of one host wrote the same file name (TF1 names
            # events files by second and host: the chief's own evaluate and the evaluator's
            # can clash). What came before counts; the file is not read again.
            self._offsets[path] = 1 << 62 if broken else offset + used
            if step is not None and (self.step is None or step > self.step):
                self.step = step
        return self.step


def newest_step(data: bytes) -> tuple[int | None, int, bool]:
    """(the largest ``Event.step`` of the whole records at the start of ``data``, bytes
    they take, whether bytes that cannot be records came after them)."""
    newest, used = None, 0
    try:
        for record, end in tfrecords(data):
            used = end
            step = event_step(record)
            if step is not None and (newest is None or step > newest):
                newest = step
    except ValueError:
        return newest, used, True
    return newest, used, False


def newest_evaluated(reader: CheckpointReader, metrics_step: int | None = None) -> int | None:
    """One-shot: the newest step evaluated, from the eval events and ``metrics_step`` (the
    step of the newest eval line of the metrics file, when known)."""
    steps = [s for s in (EvaluationFollower(reader).poll(), metrics_step) if s is not None]
    return max(steps) if steps else None
