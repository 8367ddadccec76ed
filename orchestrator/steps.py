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


def keras_fit_steps(epochs: int, examples: int, batch_size: int, num_processes: int) -> int:
    """Steps of Keras 3 ``fit`` on JAX across processes (``"keras": "jax"``) when each process
    fits its shard of arrays (``orchestrator.sharding.shard_arrays``: equal shards of
    ``examples // num_processes``, the remainder left out, as every process of the collective
    must take the same steps) for ``epochs`` Keras epochs of ``batch_size`` per process: one
    step is one batch on every process at once, the last batch of an epoch partial."""
    return epochs * math.ceil((examples // num_processes) / batch_size)
