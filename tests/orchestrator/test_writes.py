"""orchestrator/writes.py: a write into model_dir is seen at the next look; what the
launcher's other writers change (the evaluator's eval dirs, the metrics file, the lease)
is not the trainers' work, nor is a trainer's events file (it grows while it trains)."""

from __future__ import annotations

import os

import fsspec
import pytest

from orchestrator.local_fs import LocalFS
from orchestrator.writes import WriteWatch


@pytest.mark.parametrize("fs", [LocalFS(), fsspec.filesystem("file")], ids=["local", "fsspec"])
def test_a_write_is_seen_at_the_next_look_and_other_writers_are_not(tmp_path, fs):
    (tmp_path / "checkpoint").write_text("model_checkpoint_path: 'model.ckpt-100'\n")
    watch = WriteWatch(fs, str(tmp_path))
    assert watch.look() is None                                # the first look takes stock
    assert watch.look() is None
    export = tmp_path / "saved_model" / "variables"
    export.mkdir(parents=True)
    (export / "variables.data-00000-of-00001").write_bytes(b"x" * 10)
    assert watch.look() == "saved_model/variables/variables.data-00000-of-00001"
    with open(export / "variables.data-00000-of-00001", "ab") as f:    # it grows
        f.write(b"y")
    assert watch.look() == "saved_model/variables/variables.data-00000-of-00001"
    (tmp_path / "eval").mkdir()
    (tmp_path / "eval" / "events.out.tfevents.1.host").write_bytes(b"e")
    (tmp_path / "tfcluster_metrics.jsonl").write_text("{}\n")
    (tmp_path / ".tfcluster-lease.json").write_text("{}")
    assert watch.look() is None
    events = tmp_path / "events.out.tfevents.2.host"       # a trainer's summaries while it
    events.write_bytes(b"s" * 10)                          # trains: training, not a save
    assert watch.look() is None
    with open(events, "ab") as f:
        f.write(b"t")
    assert watch.look() is None
    os.remove(tmp_path / "checkpoint")
    assert watch.look() == "checkpoint"                       # a removal is a change too
