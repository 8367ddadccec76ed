"""Checkpoint reading on a local directory and on a real S3 server, with files written in
the order TensorFlow writes them."""

from __future__ import annotations

import pytest
from coordinator.tf_writes import FakeTrainer, index_header, state_text

from orchestrator.checkpoints import (
    CheckpointReader,
    num_shards_from_index_head,
    parse_state,
)


class CountingFS:
    """Wraps an fsspec filesystem and records every call the reader makes."""

    def __init__(self, fs):
        self._fs = fs
        self.calls: list[str] = []

    def __getattr__(self, name):
        attr = getattr(self._fs, name)
        if not callable(attr) or name.startswith("_") or name == "unstrip_protocol":
            return attr

        def wrapped(*args, **kwargs):
            self.calls.append(name)
            return attr(*args, **kwargs)
        return wrapped

    def _strip_protocol(self, path):
        return self._fs._strip_protocol(path)


def reader_for(storage, **kwargs) -> CheckpointReader:
    url, fs, options = storage
    return CheckpointReader(url, options, **kwargs)


def test_state_file_parsing_keeps_newest_first_and_drops_directories():
    text = state_text(["model.ckpt-100", "model.ckpt-200"]).replace(
        '"model.ckpt-200"', '"/abs/dir/model.ckpt-200"')
    assert parse_state(text) == ["model.ckpt-200", "model.ckpt-100"]
    assert parse_state("") == []


def test_index_header_gives_number_of_shards():
    # bytes of a real TF 2.15 .index (Saver(sharded=True), variables on 2 devices)
    real = bytes.fromhex("0000060802 1a020801 00010f61".replace(" ", ""))
    assert num_shards_from_index_head(real) == 2
    assert num_shards_from_index_head(index_header(3)) == 3
    assert num_shards_from_index_head(b"garbage-not-a-table") is None


def test_nothing_before_the_state_file_names_a_checkpoint(storage):
    url, fs, _ = storage
    reader = reader_for(storage)
    assert reader.newest_complete() is None                 # empty model_dir
    trainer = FakeTrainer(fs, url, shards=2)
    name = "model.ckpt-100"
    trainer.write_shard(name, 0)
    trainer.write_shard(name, 1)
    trainer.write_index(name)
    assert reader.newest_complete() is None                 # data + index, not named yet
    trainer.kept.append(name)
    trainer.write_state(trainer.kept)
    ckpt = reader.newest_complete()      # named: complete (a restore needs no .meta)
    assert ckpt is not None
    assert (ckpt.name, ckpt.step, ckpt.shards, ckpt.layout) == (name, 100, 2, "estimator")
    assert ckpt.path.endswith("/model.ckpt-100")


def test_missing_ps_shard_is_never_complete(storage):
    url, fs, _ = storage
    trainer = FakeTrainer(fs, url, shards=2)
    trainer.save(100)
    trainer.save(200, skip_shards=(1,))      # ps:1 wrote its shard somewhere else
    scan = reader_for(storage).scan()
    assert scan.named == "model.ckpt-200"
    assert scan.complete is not None and scan.complete.name == "model.ckpt-100"
    assert scan.missing == {"model.ckpt-200": ["model.ckpt-200.data-00001-of-00002"]}


def test_newer_checkpoints_replace_deleted_old_ones(storage):
    url, fs, _ = storage
    trainer = FakeTrainer(fs, url, shards=1, keep_max=2)
    reader = reader_for(storage)
    steps = []
    for step in (0, 50, 100, 150):
        trainer.save(step)
        steps.append(reader.newest_complete().step)
    assert steps == [0, 50, 100, 150]
    assert not fs.exists(f"{url}/model.ckpt-50.index")     # keep_max deleted it


def test_files_vanishing_under_the_reader_are_tolerated(storage):
    url, fs, _ = storage
    trainer = FakeTrainer(fs, url, shards=1)
    trainer.save(10)
    trainer.save(20, skip_shards=(0,))
    # TF deletes model.ckpt-10 while the state file still names it (a slow reader's view)
    trainer.delete("model.ckpt-10")
    scan = reader_for(storage).scan()
    assert scan.complete is None
    assert set(scan.missing) == {"model.ckpt-20", "model.ckpt-10"}


def test_tf2_layout_counts_saves_not_steps(storage):
    url, fs, _ = storage
    trainer = FakeTrainer(fs, url, prefix="ckpt", shards=1)
    trainer.save(3)
    ckpt = reader_for(storage).newest_complete()
    assert (ckpt.name, ckpt.layout, ckpt.number, ckpt.step) == ("ckpt-3", "tf2", 3, None)
    assert reader_for(storage, tf2_number_is_step=True).newest_complete().step == 3


@pytest.mark.parametrize("old_files", [0, 300])
def test_a_poll_never_lists_model_dir(storage, old_files):
    url, fs, options = storage
    trainer = FakeTrainer(fs, url, shards=2)
    fs.makedirs(url, exist_ok=True)
    if old_files:
        fs.pipe({f"{url}/events.out.tfevents.{i}.host": b"x" for i in range(old_files)})
    trainer.save(100)
    counting = CountingFS(fs)
    reader = CheckpointReader(url, fs=counting)
    assert reader.newest_complete().step == 100
    assert not {"ls", "glob", "find", "walk", "listdir"} & set(counting.calls)
    # state file + index + 2 shards
    assert len(counting.calls) == 4
    counting.calls.clear()
    assert reader.newest_complete().step == 100              # unchanged: state file only
    assert counting.calls == ["cat_file"]


def test_files_written_after_a_listing_are_seen(storage):
    """s3fs answers ``info`` from a cached directory listing; the reader must not."""
    url, fs, _ = storage
    trainer = FakeTrainer(fs, url, shards=2)
    trainer.save(100)
    fs.pipe_file(f"{url}/events.out.tfevents.1.host", b"x")
    reader = reader_for(storage)
    assert reader.newest_complete().step == 100
    assert [p.rsplit("/", 1)[1] for p in reader.list_prefix("events.out.")] == \
        ["events.out.tfevents.1.host"]
    reader.fs.ls(reader.root)           # a full listing, as any other caller might make
    trainer.save(200)
    assert reader.newest_complete().step == 200
