"""Checkpoints are recognised by what TensorFlow writes, not by their names: real files
written by TensorFlow 2.21 (tests/orchestrator/real_checkpoints/README.md) — a TF1 Saver's,
a CheckpointManager's ``model.ckpt-N`` (no ``.meta``) and Keras ``ckpt_{epoch}`` — are
complete, and their steps are read from the files without TensorFlow."""

from __future__ import annotations

import os
import shutil

import pytest

from orchestrator.checkpoints import CheckpointReader
from orchestrator.tfformats import index_entries, is_object_graph

REAL = os.path.join(os.path.dirname(__file__), "real_checkpoints")


def copy_of(kind: str, tmp_path) -> str:
    target = tmp_path / kind
    shutil.copytree(os.path.join(REAL, kind), target)
    return str(target)


@pytest.mark.parametrize("kind, name, layout, step, step_from", [
    ("tf1", "model.ckpt-10", "estimator", 10, "name"),
    ("mgr", "model.ckpt-3", "tf2", 21, "step/.ATTRIBUTES/VARIABLE_VALUE"),
    ("keras", "ckpt_2", "tf2", 8, "optimizer/_iterations/.ATTRIBUTES/VARIABLE_VALUE"),
])
def test_real_checkpoints_are_complete_with_their_steps(tmp_path, kind, name, layout, step,
                                                         step_from):
    ckpt = CheckpointReader(copy_of(kind, tmp_path)).newest_complete()
    assert ckpt is not None, f"{kind}: {name} not seen as complete"
    assert (ckpt.name, ckpt.layout, ckpt.step, ckpt.step_from) == \
        (name, layout, step, step_from)
    assert ckpt.progress == f"step {step}"


def test_a_checkpoint_manager_number_is_a_save_count_not_a_step(tmp_path):
    ckpt = CheckpointReader(copy_of("mgr", tmp_path)).newest_complete()
    assert ckpt.number == 3 and ckpt.step == 21       # model.ckpt-3 is the third save


def test_a_missing_data_shard_still_makes_it_incomplete(tmp_path):
    model_dir = copy_of("keras", tmp_path)
    os.remove(os.path.join(model_dir, "ckpt_2.data-00000-of-00001"))
    scan = CheckpointReader(model_dir).scan()
    assert scan.complete is None
    assert scan.missing == {"ckpt_2": ["ckpt_2.data-00000-of-00001"]}


def test_no_step_known_is_said_in_one_line(tmp_path):
    # a CheckpointManager of one variable: save_counter counts saves, no tensor is a step
    ckpt = CheckpointReader(copy_of("nostep", tmp_path)).newest_complete()
    assert (ckpt.name, ckpt.layout, ckpt.number, ckpt.step) == ("ckpt-2", "tf2", 2, None)
    assert ckpt.progress == "ckpt-2 (its step is neither in its name nor in the checkpoint)"


def test_index_tables_tell_object_graphs_from_savers():
    def index(kind, name):
        with open(os.path.join(REAL, kind, name + ".index"), "rb") as f:
            return f.read()
    assert not is_object_graph(index("tf1", "model.ckpt-10"))
    assert is_object_graph(index("mgr", "model.ckpt-3"))
    assert sorted(index_entries(index("tf1", "model.ckpt-10"))) == ["global_step", "w"]
    with pytest.raises(ValueError):
        list(index_entries(b"\x00" * 100))


@pytest.mark.parametrize("kind, stored", [("tf1", 10), ("mgr", 21), ("keras", 8),
                                          ("nostep", None)])
def test_the_step_stored_in_the_data_is_read_whatever_the_name_says(tmp_path, kind, stored):
    """A TF1 Saver's step is taken from its name while the job runs; ``stored_step`` reads
    the variable itself (tests/epochs compares it with the trainers' steps)."""
    reader = CheckpointReader(copy_of(kind, tmp_path))
    assert reader.stored_step(reader.newest_complete()) == stored
