"""What the spec's ``keras`` route gives each task (launcher/plan.py's keras_env), the
collective it makes of a Keras 3 JAX job, the environment check's words for a host that
lacks the route's packages (agent/probes.py, keras_problems), and Keras 3's own files
read as checkpoints (orchestrator/checkpoints.py: optimizer iterations in the .h5)."""

from __future__ import annotations

import itertools
import json

import pytest

from launcher.api import parse_spec
from launcher.backends.agent.probes import keras_problems
from launcher.plan import build_plan
from launcher.restarts import RestartBook
from orchestrator.checkpoints import CheckpointReader
from orchestrator.decisions import CLUSTER


def plan_of(doc: dict):
    ports = itertools.count(40000)
    return build_plan(parse_spec(json.dumps(doc)), port_for=lambda host: next(ports))


BASE = {"command": ["python", "t.py"], "model_dir": "m", "max_steps": 100}


def test_jax_gives_every_process_its_place_and_the_first_trainer_is_the_coordinator():
    plan = plan_of({**BASE, "cluster": {"chief": 1, "worker": 2}, "keras": "jax"})
    assert plan.synchronous and plan.keras == "jax"
    addresses = "localhost:40000,localhost:40001,localhost:40002"
    assert [t.address for t in plan.tasks] == addresses.split(",")
    for process, task in enumerate(plan.tasks):
        assert {k: v for k, v in task.env.items() if k.startswith("KERAS_")} == {
            "KERAS_BACKEND": "jax", "KERAS_DISTRIBUTION_JOB_ADDRESSES": addresses,
            "KERAS_DISTRIBUTION_NUM_PROCESSES": "3",
            "KERAS_DISTRIBUTION_PROCESS_ID": str(process)}
        assert "TF_USE_LEGACY_KERAS" not in task.env
    assert plan.storage.keras and plan.storage.reader().keras


def test_jax_epochs_each_process_fits_its_own_equal_shard_to_the_derived_max_steps(
        capsys, tmp_path):
    """With ``epochs``, a JAX process's TFCLUSTER_SHARD_INDEX is its place in the collective,
    ``shard_arrays`` gives each process its own equal part, and Keras' fit over it takes
    exactly the derived TFCLUSTER_MAX_STEPS; the shard line the epochs note looks for is
    printed (orchestrator.sharding)."""
    import math

    import numpy as np

    from launcher.output.closing import read_shard_marks
    from orchestrator import sharding

    doc = {"command": ["python", "t.py"], "model_dir": "m", "keras": "jax",
           "cluster": {"chief": 1, "worker": 2}, "epochs": 3, "examples": 100,
           "batch_size": 8}
    plan = plan_of(doc)
    examples = np.arange(100)
    seen = []
    for task in plan.tasks:
        env = task.env
        assert env["TFCLUSTER_SHARD_INDEX"] == env["KERAS_DISTRIBUTION_PROCESS_ID"]
        assert env["TFCLUSTER_NUM_SHARDS"] == env["KERAS_DISTRIBUTION_NUM_PROCESSES"] == "3"
        (part,) = sharding.shard_arrays(examples, shard=sharding.current_shard(env))
        seen.append(part)
        # Keras fit: epochs x batches per epoch (the last partial), the same on every process
        assert int(env["TFCLUSTER_EPOCHS"]) * math.ceil(len(part) / 8) == \
            int(env["TFCLUSTER_MAX_STEPS"]) == 15
    assert [len(p) for p in seen] == [33, 33, 33]
    assert sorted(np.concatenate(seen)) == list(range(99))    # disjoint; 1 left out
    sharding._announced.clear()
    sharding.shard_arrays(examples, shard=sharding.Shard(1, 3))
    log = capsys.readouterr().err
    assert "tfcluster: reading shard 1 of 3 (shard_arrays)" in log
    (tmp_path / "worker-0.log").write_text(log)        # the task's log: no epochs note
    assert read_shard_marks([str(tmp_path / "worker-0.log")])


def test_shard_arrays_refuses_arrays_of_different_lengths_or_too_few_examples():
    from orchestrator.sharding import Shard, shard_arrays

    with pytest.raises(ValueError, match="different lengths"):
        shard_arrays([1, 2, 3], [1, 2], shard=Shard(0, 2))
    with pytest.raises(ValueError, match="2 examples for 3 shards"):
        shard_arrays([1, 2], shard=Shard(0, 3))


def test_a_single_jax_worker_is_a_collective_of_one():
    plan = plan_of({**BASE, "cluster": {"worker": 1}, "keras": "jax"})
    assert plan.strategy == "multi_worker_mirrored"
    assert plan.tasks[0].env["KERAS_DISTRIBUTION_NUM_PROCESSES"] == "1"


def test_tf_keras_sets_legacy_keras_for_every_task_and_infers_the_strategy():
    mwms = plan_of({**BASE, "cluster": {"worker": 2}, "keras": "tf-keras"})
    assert [t.env["TF_USE_LEGACY_KERAS"] for t in mwms.tasks] == ["1", "1"]
    assert not any(k.startswith("KERAS_") for t in mwms.tasks for k in t.env)
    assert not mwms.storage.keras
    pss = plan_of({**BASE, "cluster": {"chief": 1, "worker": 1, "ps": 1},
                   "keras": "tf-keras"})
    assert pss.strategy == "parameter_server"     # Keras has no Estimator strategy
    assert {t.env["TF_USE_LEGACY_KERAS"] for t in pss.tasks} == {"1"}
    plain = plan_of({**BASE, "cluster": {"worker": 2}})
    assert plain.keras is None and "TF_USE_LEGACY_KERAS" not in plain.tasks[0].env


def test_a_failed_jax_process_restarts_the_whole_group():
    plan = plan_of({**BASE, "cluster": {"worker": 2}, "keras": "jax"})
    verdict = RestartBook(dict(plan.restart), synchronous=plan.synchronous).judge_exit(
        "worker", "worker:1", -9, [], False)
    assert verdict.scope == CLUSTER


@pytest.mark.parametrize("found, keras, words", [
    ({"tf": "2.21.0", "tf_keras": "2.21.0"}, "tf-keras", None),
    ({"tf": "2.21.0", "tf_keras": None}, "tf-keras",
     "has TensorFlow 2.21.0 but no tf-keras (the spec's \"keras\": \"tf-keras\"): pip install "
     "--no-deps 'tf-keras==2.21.*'"),
    ({"tf": "2.21.0", "tf_keras": "2.20.1"}, "tf-keras",
     "tf-keras 2.20.1 of /p/python does not match its TensorFlow 2.21.0"),
    ({"tf": None}, "tf-keras", "cannot import tensorflow"),
    ({"jax": "0.10.2", "keras": "3.15.1"}, "jax", None),
    ({"jax": None, "keras": "3.15.1"}, "jax", "cannot import jax"),
    ({"jax": "0.10.2", "keras": "2.15.0"}, "jax", "has Keras 2.15.0"),
])
def test_the_environment_check_names_what_the_route_lacks(found, keras, words):
    problems = keras_problems(found, "/p/python", keras)
    if words is None:
        assert problems == []
    else:
        assert len(problems) == 1 and words in problems[0]


def test_keras_3_files_are_checkpoints_with_their_step_only_for_a_keras_reader(tmp_path):
    h5py = pytest.importorskip("h5py")
    with h5py.File(tmp_path / "ckpt-1.weights.h5", "w") as f:
        f["optimizer/vars/0"] = 40
    found = CheckpointReader(str(tmp_path), keras=True).newest_complete()
    assert found is not None and (found.name, found.step, found.layout) == \
        ("ckpt-1.weights.h5", 40, "keras")
    assert CheckpointReader(str(tmp_path)).newest_complete() is None
    (tmp_path / "ckpt-2.weights.h5").write_bytes(b"\x89HDF being written")
    newest = CheckpointReader(str(tmp_path), keras=True).newest_complete()
    assert newest is not None and (newest.name, newest.step) == ("ckpt-2.weights.h5", None)


def test_keras_verbose_2_lines_count_steps_across_epochs():
    from support import FakeClock

    from launcher.output.trainer_steps import TrainerSteps

    steps = TrainerSteps(FakeClock())
    for line in ["Epoch 1/2", "4/4 - 1s - 339ms/step - loss: 0.7049",       # Keras 3 (JAX)
                 "Epoch 2/2", "4/4 - 0s - 13ms/step - loss: 0.7008"]:
        steps.see("worker:0", line)
    assert steps.newest().step == 8
    legacy = TrainerSteps(FakeClock())
    for line in ["Epoch 2/2", "5/5 - 0s - loss: 0.7019 - accuracy: 0.5813 - 111ms/epoch"]:
        legacy.see("worker:1", line)                                      # tf-keras
    assert legacy.newest().step == 10
    other = TrainerSteps(FakeClock())
    other.see("chief:0", "3/10 - copied")       # a count, but no time after it
    assert other.newest() is None


@pytest.mark.parametrize("has_h5py", [True, False])
def test_a_launcher_without_h5py_says_once_it_cannot_read_keras_steps(monkeypatch, tmp_path,
                                                                       has_h5py):
    """Without h5py where the launcher runs, a Keras 3 JAX job is told so once before it
    starts (how to fix it), and a Keras file's step is unknown rather than wrong; with it,
    nothing is said and the step is read."""
    import io
    import sys

    import fsspec

    from launcher.backends.storage_check import keras_steps_note
    from launcher.output.console import Console
    from launcher.records.events import EventLog
    from orchestrator.checkpoints import keras_step

    h5py = pytest.importorskip("h5py")
    path = tmp_path / "ckpt-1.weights.h5"
    with h5py.File(path, "w") as f:
        f["optimizer/vars/0"] = 12
    if not has_h5py:
        monkeypatch.setitem(sys.modules, "h5py", None)       # import h5py: ImportError
    err = io.StringIO()
    events = EventLog(str(tmp_path / "events.jsonl"))
    for plan in (plan_of({**BASE, "cluster": {"worker": 2}, "keras": "jax"}),
                 plan_of({**BASE, "cluster": {"worker": 2}})):    # no Keras files: silent
        keras_steps_note(plan, Console(out=io.StringIO(), err=err), events)
    lines = err.getvalue().splitlines()
    if has_h5py:
        assert lines == []
        assert keras_step(fsspec.filesystem("file"), str(path)) == 12
        return
    assert len(lines) == 1
    assert lines[0].startswith(f"tfcluster: this launcher's Python ({sys.executable}) has no "
                               f"h5py: it cannot read the step of Keras 3's checkpoints")
    assert lines[0].endswith("pip install h5py (or 'tfcluster[keras]') beside the launcher")
    assert keras_step(fsspec.filesystem("file"), str(path)) is None
    assert "keras_steps_unreadable" in (tmp_path / "events.jsonl").read_text()
