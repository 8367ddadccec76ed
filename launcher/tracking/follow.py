"""What the tracker reads of model_dir, each look only what is new: the evaluations of
``tfcluster_metrics.jsonl`` (each checkpoint evaluated afresh), and the scalars of the
events files TensorFlow writes (the training loss and steps/s at model_dir's top or in
``train/``, TF's own evaluator in ``eval*/`` and Keras' ``validation/``), read from where
the last look stopped. Without TensorFlow (orchestrator.tfformats)."""

from __future__ import annotations

import struct
from typing import Any

from orchestrator.tfformats import (
    EVENTS_DEPTH,
    EVENTS_PREFIX,
    events_dir_kind,
    scalars_of_event,
    tfrecords,
)

LIST_EVERY = 6                  # looks between two listings of the events files
READ_MAX = 8 << 20              # bytes of one events file read per look at most


def metric_key(*parts: str) -> str:
    """An MLflow metric key: letters, digits and ``_-. /`` kept, the rest ``_``."""
    key = "/".join(p.strip("/") for p in parts if p)
    return "".join(c if c.isalnum() or c in "_-. /" else "_" for c in key)


class ModelDirFollower:
    """``look()``: the metrics new in model_dir since the last look, as MLflow metric
    dicts (key, value, timestamp in ms, step)."""

    def __init__(self, storage: Any):
        reader = storage.reader()       # model_dir's filesystem, its options applied
        self.storage, self.fs, self.root = storage, reader.fs, reader.root.rstrip("/")
        self.seen_evaluations: set[tuple[int, str, str]] = set()
        self.offsets: dict[str, int] = {}      # events file -> bytes read
        self.prefixes: dict[str, str] = {}     # events file -> its metric keys' prefix
        self._looks = 0

    def look(self, last: bool = False) -> list[dict[str, Any]]:
        """``last``: the job ended; events files are listed whatever the count of looks (a
        resumed run's chief opens a new one, which the looks since may not have listed)."""
        out = self._evaluations()
        if last or self._looks % LIST_EVERY == 0 or not self.prefixes:
            self._list_events()
        self._looks += 1
        for path in sorted(self.prefixes):
            out += self._new_scalars(path)
        return out

    def _evaluations(self) -> list[dict[str, Any]]:
        try:
            records = self.storage.metrics()
        except (OSError, ValueError):
            return []
        out = []
        for r in records:
            key = (r.step, r.split, r.checkpoint)
            if key in self.seen_evaluations:
                continue
            self.seen_evaluations.add(key)
            out += [{"key": metric_key("evaluated", r.split, name), "value": value,
                     "timestamp": int(r.time * 1000), "step": r.step}
                    for name, value in r.metrics.items()]
        return out

    def _list_events(self) -> None:
        found: list[str] = []
        for depth in range(EVENTS_DEPTH):
            try:
                found += self.fs.glob(f"{self.root}/{'*/' * depth}{EVENTS_PREFIX}*")
            except (OSError, ValueError):
                return
        for path in found:
            parent, _, name = path.rstrip("/").rpartition("/")
            if not name.startswith(EVENTS_PREFIX) or path in self.prefixes:
                continue
            prefix = events_prefix(parent, self.root)
            if prefix is not None:
                self.prefixes[path] = prefix

    def _new_scalars(self, path: str) -> list[dict[str, Any]]:
        start = self.offsets.get(path, 0)
        try:
            data = self.fs.cat_file(path, start, start + READ_MAX)
        except (OSError, ValueError):
            return []
        out, end = [], 0
        try:
            for record, after in tfrecords(data):
                end = after
                try:
                    scalars = scalars_of_event(record)
                except (ValueError, IndexError):
                    continue
                out += [{"key": metric_key(self.prefixes[path], s.tag), "value": s.value,
                         "timestamp": int(s.wall_time * 1000), "step": s.step}
                        for s in scalars if s.value == s.value]      # NaN left out
        except ValueError:
            end = len(data)             # not TFRecords past this point: never read again
        if end == 0 and len(data) == READ_MAX:      # one record larger than a read (a graph)
            end = 12 + struct.unpack_from("<Q", data)[0] + 4      # skipped: no scalars
        self.offsets[path] = start + end
        return out


def events_prefix(parent: str, root: str) -> str | None:
    """The metric keys' prefix of the events in folder ``parent``
    (orchestrator.tfformats.events_dir_kind): ``train``, ``validation`` for Keras',
    ``tf_eval`` (``tf_eval_NAME`` for Estimator's ``eval_NAME/``) for TF's evaluator; None
    for any other folder."""
    kind = events_dir_kind(parent, root)
    return kind if kind in (None, "train", "validation") else f"tf_{kind}"
