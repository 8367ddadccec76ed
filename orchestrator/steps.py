"""How many global steps make the job: max_steps given, or derived from epochs."""

from __future__ import annotations

import math


def shard_sizes(examples: int, num_shards: int) -> list[int]:
    """Examples per shard when shard i takes elements i, i+n, i+2n... (tf.data `shard`)."""
    return [len(range(i, examples, num_shards)) for i in range(num_shards)]


def derive_max_steps(
    epochs: int, examples: int, batch_size: int, num_shards: int, synchronous: bool = False
) -> int:
    """Global steps after which every example was seen `epochs` times by the whole cluster.

    Asynchronous training (Estimator, ParameterServerStrategy): every trainer step adds one to
    global_step, so the job ends after the sum of the trainers' steps. Each trainer reads its
    own shard `epochs` times, batched across epoch boundaries (`repeat(epochs).batch(b)`).
    Synchronous training (MultiWorkerMirroredStrategy): one global step is one batch on every
    trainer at once, so the longest shard decides.
    """
    per_shard = [math.ceil(n * epochs / batch_size) for n in shard_sizes(examples, num_shards)]
    return max(per_shard) if synchronous else sum(per_shard)
