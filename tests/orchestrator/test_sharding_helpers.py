"""The sharding and epoch helpers without a cluster: environment parsing, file sharding, the
step arithmetic, and the tf.data pipelines in both TensorFlow versions."""

from __future__ import annotations

import json
import subprocess

import pytest
from hypothesis import given
from hypothesis import strategies as st
from support import PY_TF215, PY_TF221, REPO, FakeClock

from orchestrator.epochs import EpochPlan, epoch_plan, wait_for_step
from orchestrator.sharding import Shard, current_shard, shard_files
from orchestrator.steps import derive_max_steps, shard_sizes, shard_steps


def test_shard_from_environment():
    assert current_shard({}) == Shard(0, 1)
    env = {"TFCLUSTER_SHARD_INDEX": "2", "TFCLUSTER_NUM_SHARDS": "3"}
    assert current_shard(env) == Shard(2, 3)


@pytest.mark.parametrize("env,message", [
    ({"TFCLUSTER_SHARD_INDEX": "1"}, "TFCLUSTER_NUM_SHARDS is not set"),
    ({"TFCLUSTER_NUM_SHARDS": "2"}, "TFCLUSTER_SHARD_INDEX is not set"),
    ({"TFCLUSTER_SHARD_INDEX": "x", "TFCLUSTER_NUM_SHARDS": "2"}, "'x' is not an integer"),
    ({"TFCLUSTER_SHARD_INDEX": "2", "TFCLUSTER_NUM_SHARDS": "2"}, "outside 0..1"),
    ({"TFCLUSTER_SHARD_INDEX": "0", "TFCLUSTER_NUM_SHARDS": "0"}, "at least 1"),
])
def test_bad_shard_environment_names_the_problem(env, message):
    with pytest.raises(ValueError, match=message):
        current_shard(env)


def test_shard_files_round_robin_over_sorted_names():
    files = [f"part-{i}" for i in (3, 0, 4, 1, 2)]
    parts = [shard_files(files, Shard(i, 2)) for i in range(2)]
    assert parts == [["part-0", "part-2", "part-4"], ["part-1", "part-3"]]
    with pytest.raises(ValueError, match="2 files for 3 shards"):
        shard_files(files[:2], Shard(0, 3))


def test_epoch_plan_from_environment():
    env = {"TFCLUSTER_SHARD_INDEX": "2", "TFCLUSTER_NUM_SHARDS": "3", "TFCLUSTER_EPOCHS": "2",
           "TFCLUSTER_EXAMPLES": "2003", "TFCLUSTER_BATCH_SIZE": "32",
           "TFCLUSTER_MAX_STEPS": "126"}
    plan = epoch_plan(env, batch_size=100)
    assert plan.counted and plan.batch_size == 32          # the spec's value wins
    assert plan.shard_steps == 42                           # 667 examples x 2 / 32
    assert plan.total_steps() == 126 == derive_max_steps(2, 2003, 32, 3)
    assert plan.total_steps(num_trainers=2) == 126          # PSS: the 2 workers train
    bare = epoch_plan({}, batch_size=64, max_steps=10)
    assert not bare.counted and (bare.batch_size, bare.max_steps) == (64, 10)
    with pytest.raises(ValueError, match="not given in epochs"):
        bare.total_steps()
    with pytest.raises(ValueError, match="TFCLUSTER_EPOCHS must be at least 1"):
        epoch_plan({"TFCLUSTER_EPOCHS": "0"})


def test_every_task_agrees_on_the_total():
    """The evaluator and the ps read no shard, but stop at the same global step."""
    cluster = {"chief": ["h:1"], "worker": ["h:2", "h:3"], "ps": ["h:4"]}
    epochs = {"TFCLUSTER_EPOCHS": "3", "TFCLUSTER_EXAMPLES": "20000",
              "TFCLUSTER_BATCH_SIZE": "100"}
    totals = set()
    for task, shard in (("chief", "0"), ("worker", "2"), ("evaluator", None), ("ps", None)):
        env = dict(epochs, TF_CONFIG=json.dumps({"cluster": cluster, "task": {"type": task}}))
        if shard is not None:
            env.update(TFCLUSTER_SHARD_INDEX=shard, TFCLUSTER_NUM_SHARDS="3")
        totals.add(epoch_plan(env).total_steps())
    assert totals == {602}
    with pytest.raises(ValueError, match="TF_CONFIG is not a JSON object"):
        epoch_plan({"TF_CONFIG": "[1]"})


def test_wait_for_step_until_total_or_stalled():
    clock = FakeClock()
    steps = iter([10, 10, 11, 11, 11, 20, 30])
    assert wait_for_step(lambda: next(steps), 30, 5, 1, clock, clock.sleep) == 30
    clock = FakeClock()
    steps = iter([10, 10, 12] + [12] * 100)      # stuck at 12 from t=2
    assert wait_for_step(lambda: next(steps), 30, 5, 1, clock, clock.sleep) == 12
    assert clock.now == 7


@given(examples=st.integers(1, 5000), epochs=st.integers(1, 5), batch=st.integers(1, 300),
       shards=st.integers(1, 9))
def test_step_arithmetic(examples, epochs, batch, shards):
    sizes = shard_sizes(examples, shards)
    assert sum(sizes) == examples and max(sizes) - min(sizes) <= 1
    for n, steps in zip(sizes, shard_steps(epochs, examples, batch, shards)):
        assert (steps - 1) * batch < n * epochs <= steps * batch or n == steps == 0
    assert derive_max_steps(epochs, examples, batch, shards) == \
        sum(EpochPlan(Shard(i, shards), epochs, examples, batch).shard_steps
            for i in range(shards))
    synchronous = derive_max_steps(epochs, examples, batch, shards, synchronous=True)
    assert (synchronous - 1) * batch * shards < examples * epochs <= synchronous * batch * shards


PIPELINE = """
import collections, json, sys
import tensorflow as tf
from orchestrator.epochs import epoch_plan, training_dataset
from orchestrator.sharding import mwms_data_sharding
examples, epochs, batch, shards = 2003, 2, 32, 3
counts, steps = collections.Counter(), []
for i in range(shards):
    env = {"TFCLUSTER_SHARD_INDEX": str(i), "TFCLUSTER_NUM_SHARDS": str(shards),
           "TFCLUSTER_EPOCHS": str(epochs), "TFCLUSTER_EXAMPLES": str(examples),
           "TFCLUSTER_BATCH_SIZE": str(batch)}
    plan = epoch_plan(env)
    data = training_dataset(tf.data.Dataset.range(examples), plan, shuffle_buffer=100)
    got = [b.numpy().tolist() for b in data]
    counts.update(x for b in got for x in b)
    steps.append([len(got), plan.shard_steps])
policy = mwms_data_sharding(tf.data.Dataset.range(4)).options().experimental_distribute
DATA = tf.data.experimental.AutoShardPolicy.DATA
print(json.dumps({"ids": sorted(set(counts)) == list(range(examples)),
                  "times": sorted(set(counts.values())), "steps": steps,
                  "data_policy": policy.auto_shard_policy == DATA}))
"""


@pytest.mark.parametrize("python", [PY_TF215, PY_TF221], ids=["tf2.15", "tf2.21"])
def test_training_dataset_reads_each_example_epochs_times(python):
    out = subprocess.run([python, "-c", PIPELINE], capture_output=True, text=True,
                         timeout=180, cwd=REPO, env={"TF_CPP_MIN_LOG_LEVEL": "3"})
    assert out.returncode == 0, out.stderr
    result = json.loads(out.stdout.strip().splitlines()[-1])
    assert result["ids"] and result["times"] == [2]
    assert all(got == planned for got, planned in result["steps"])
    assert result["data_policy"]
