"""The metrics file in model_dir: one JSON line per evaluated checkpoint and split.

``<model_dir>/tfcluster_metrics.jsonl``, each line::

    {"step": 1200, "checkpoint": "<model_dir>/model.ckpt-1200", "split": "eval",
     "metrics": {"accuracy": 0.72, "loss": 0.55}, "time": 1764495000.123}

``step`` is the global_step stored in the checkpoint (not the number in its file name),
``split`` is ``eval`` or ``train``, ``time`` is when the evaluation finished (Unix seconds).
Written by the evaluator (orchestrator.evaluation), read by the launcher (live progress line,
end-of-job table, ``launch report``). Any fsspec URL works; nothing here needs TensorFlow.
"""

from __future__ import annotations

import json
import math
import os
from dataclasses import asdict, dataclass
from typing import Any

from orchestrator.local_fs import open_url, url_to_fs

METRICS_FILE = "tfcluster_metrics.jsonl"
SPLITS = ("eval", "train")


@dataclass
class MetricsRecord:
    """One evaluation of one checkpoint, as one line of the metrics file."""

    step: int
    checkpoint: str
    split: str
    metrics: dict[str, float]
    time: float

    def to_json(self) -> str:
        return json.dumps(asdict(self), sort_keys=False)

    @classmethod
    def from_dict(cls, d: dict) -> MetricsRecord:
        return cls(step=int(d["step"]), checkpoint=str(d["checkpoint"]), split=str(d["split"]),
                   metrics={str(k): float(v) for k, v in dict(d["metrics"]).items()},
                   time=float(d["time"]))


def metrics_path(model_dir: str) -> str:
    """The metrics file of a model_dir (a local path or any fsspec URL)."""
    return model_dir.rstrip("/") + "/" + METRICS_FILE


def clean_metrics(values: dict) -> dict[str, float]:
    """Evaluation results as plain floats: global_step dropped (it is the line's step),
    non-numbers and NaN/inf left out (JSON cannot carry them)."""
    out: dict[str, float] = {}
    for name, value in values.items():
        if name == "global_step":
            continue
        try:
            number = float(value)
        except (TypeError, ValueError):
            continue
        if math.isfinite(number):
            out[str(name)] = number
    return out


def read_metrics(path_or_model_dir: str,
                 storage_options: dict[str, Any] | None = None) -> list[MetricsRecord]:
    """Every complete line of a metrics file (or of ``model_dir``'s); [] when there is none.

    A line being written (no newline yet) or a broken line is skipped, so a reader never
    trips over a writer.
    """
    path = path_or_model_dir
    if not path.endswith(".jsonl"):
        path = metrics_path(path)
    try:
        with open_url(path, "rt", encoding="utf-8", **(storage_options or {})) as f:
            text = f.read()
    except (FileNotFoundError, IsADirectoryError):
        return []
    records = []
    for line in text.splitlines(keepends=True):
        if not line.endswith("\n") or not line.strip():
            continue
        try:
            records.append(MetricsRecord.from_dict(json.loads(line)))
        except (ValueError, KeyError, TypeError):
            continue
    return records


def latest_by_split(records: list[MetricsRecord]) -> dict[str, MetricsRecord]:
    """The newest record (highest step, then latest time) of each split."""
    latest: dict[str, MetricsRecord] = {}
    for r in records:
        old = latest.get(r.split)
        if old is None or (r.step, r.time) >= (old.step, old.time):
            latest[r.split] = r
    return latest


class MetricsWriter:
    """Appends records to the metrics file through fsspec.

    The whole file is rewritten on each append (object stores have no append); on a local
    disk through a temporary file and a rename, so readers never see half a file.
    """

    def __init__(self, model_dir: str):
        self.path = metrics_path(model_dir)
        self.fs, self.fs_path = url_to_fs(self.path)
        self.records = read_metrics(self.path)

    def append(self, record: MetricsRecord) -> None:
        self.records.append(record)
        text = "".join(r.to_json() + "\n" for r in self.records)
        if _is_local(self.fs):
            os.makedirs(os.path.dirname(self.fs_path) or ".", exist_ok=True)
            tmp = f"{self.fs_path}.tmp-{os.getpid()}"
            with open(tmp, "w", encoding="utf-8") as f:
                f.write(text)
            os.replace(tmp, self.fs_path)
        else:
            with self.fs.open(self.fs_path, "w", encoding="utf-8") as f:
                f.write(text)


def _is_local(fs) -> bool:
    protocol = fs.protocol if isinstance(fs.protocol, tuple) else (fs.protocol,)
    return "file" in protocol or "local" in protocol
