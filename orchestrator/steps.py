"""How many global steps make the job: max_steps given, or derived from epochs."""

from __future__ import annotations

import math


def shard_sizes(examples: int, num_shards: int) -> list[int]:
    """Examples per shard when shard i takes elements i, i+n, i+2n... (tf.data `shard`)."""
    return [len(range(i, examples, num_shards)) for i in range(num_shards)]


def shard_steps(epochs: int, examples: int, batch_size: int, num_shards: int) -> list[int]:
    """Steps of each trainer that reads its shard ``epochs`` times, batched across epoch
    boundaries (``shard().repeat(epochs).batch(b)``): only its very last batch is partial."""
    return [math.ceil(n * epochs / batch_size) for n in shard_sizes(examples, num_shards)]


def derive_max_steps(
    epochs: int, examples: int, batch_size: int, num_shards: int, synchronous: bool = False
) -> int:
    """Global steps after which every example was seen `epochs` times by the whole cluster.

    Asynchronous training (Estimator, ParameterServerStrategy): every trainer step adds one to
    global_step, so the job ends after the sum of the trainers' steps. Each trainer reads its
    own shard `epochs` times, batched across epoch boundaries (`repeat(epochs).batch(b)`).
    Synchronous training (MultiWorkerMirroredStrategy): one global step is one global batch
    (``batch_size`` x trainers) split among the trainers; TensorFlow shards each global batch
    (``AutoShardPolicy.DATA``, orchestrator.sharding) and the distributed iterator runs while
    any trainer has data, so the steps are the global batches in ``epochs`` passes.
    """
    if synchronous:
        return math.ceil(examples * epochs / (batch_size * num_shards))
    return sum(shard_steps(epochs, examples, batch_size, num_shards))
