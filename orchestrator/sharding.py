"""Which part of the training data a task reads, from the task environment.

The launcher gives every task that reads training data ``TFCLUSTER_SHARD_INDEX`` and
``TFCLUSTER_NUM_SHARDS``: the chief is shard 0, then the workers in order, so the chief and
worker 0 never read the same examples. Without them (a plain single-process run) a task
reads everything: shard 0 of 1.

- Estimator (and any trainer that builds its own input): ``shard_dataset`` on a dataset of
  single examples, before ``repeat`` and ``batch``; or ``shard_files`` for many files.
- ParameterServerStrategy: the coordinator builds every worker's input with
  ``ClusterCoordinator.create_per_worker_dataset(pss_dataset_fn(...))``; each worker's copy is
  sharded by the worker's index (the workers are the trainers there, the chief only
  coordinates, so TFCLUSTER_SHARD_INDEX, which counts the chief, does not apply).
- MultiWorkerMirroredStrategy: let TensorFlow shard a distributed dataset and do not shard it
  yourself. Use ``AutoShardPolicy.DATA`` (``mwms_data_sharding``): the default (FILE/AUTO) is
  a hard error on a single-file dataset in TF 2.21 and silently uneven on a few files. With
  DATA every worker reads the whole input and keeps its part of each global batch, so each
  example is consumed once per epoch by the cluster. Batch by the *global* batch size
  (per-worker batch x workers) and iterate the finite dataset to its end: the distributed
  iterator ends on every worker at once, even with a last partial batch.

- Keras 3 on JAX across processes (``"keras": "jax"``): ``shard_arrays`` on the whole
  arrays, then ``fit`` this process's part with ``batch_size`` (per process) and
  ``epochs`` (``TFCLUSTER_*``); the shards are equal (every process of the collective takes
  the same steps), so the last ``examples % processes`` examples are left out.

TensorFlow is imported only by the functions that build datasets.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Callable

INDEX_VAR = "TFCLUSTER_SHARD_INDEX"
COUNT_VAR = "TFCLUSTER_NUM_SHARDS"
# Printed once per process by the helpers below: the launcher looks for it in the trainers'
# output to tell whether the spec's ``epochs`` had any effect (launcher/output/closing.py).
SHARD_MARK = "tfcluster: reading shard"
_announced: set[str] = set()


def announce(how: str, shard: Shard | None = None) -> None:
    """Say once per process (on stderr) that this task reads its part of the data."""
    if how in _announced:
        return
    _announced.add(how)
    part = f" {shard.index} of {shard.count}" if shard is not None else ""
    print(f"{SHARD_MARK}{part} ({how})", file=sys.stderr, flush=True)


@dataclass(frozen=True)
class Shard:
    """Shard ``index`` of ``count``: elements index, index+count, index+2*count..."""

    index: int = 0
    count: int = 1

    def __post_init__(self) -> None:
        if self.count < 1:
            raise ValueError(f"number of shards must be at least 1, got {self.count}")
        if not 0 <= self.index < self.count:
            raise ValueError(f"shard index {self.index} is outside 0..{self.count - 1}")


def _env_int(env: Mapping[str, str], name: str) -> int:
    value = env[name]
    try:
        return int(value)
    except ValueError:
        raise ValueError(f"{name}={value!r} is not an integer") from None


def current_shard(env: Mapping[str, str] | None = None) -> Shard:
    """This task's shard from the environment; shard 0 of 1 when the launcher set none."""
    env = os.environ if env is None else env
    has_index, has_count = INDEX_VAR in env, COUNT_VAR in env
    if not has_index and not has_count:
        return Shard()
    if has_index != has_count:
        missing = COUNT_VAR if has_index else INDEX_VAR
        raise ValueError(f"{missing} is not set, but {INDEX_VAR}/{COUNT_VAR} go together")
    try:
        return Shard(_env_int(env, INDEX_VAR), _env_int(env, COUNT_VAR))
    except ValueError as e:
        raise ValueError(f"bad shard environment: {e}") from None


def shard_dataset(dataset: Any, shard: Shard | None = None) -> Any:
    """This task's part of a ``tf.data`` dataset of single examples (``Dataset.shard``).

    Shard before shuffle, repeat and batch: the shard sizes are then exactly
    ``orchestrator.steps.shard_sizes``, which the launcher's derived max_steps counts on.
    """
    shard = shard or current_shard()
    announce("shard_dataset", shard)
    return dataset if shard.count == 1 else dataset.shard(shard.count, shard.index)


def shard_files(files: Sequence[str], shard: Shard | None = None) -> list[str]:
    """This task's files, round robin over the sorted names.

    Every shard needs at least one file. Files rarely hold equal numbers of examples, so the
    launcher's derived max_steps (which assumes example sharding) is then only an estimate:
    count the steps from the files you got, or shard by example with ``shard_dataset``.
    """
    shard = shard or current_shard()
    names = sorted(files)
    if len(names) < shard.count:
        raise ValueError(f"{len(names)} files for {shard.count} shards: shard "
                         f"{len(names)} would read nothing; use shard_dataset on examples")
    announce("shard_files", shard)
    return names[shard.index::shard.count]


def shard_arrays(*arrays: Any, shard: Shard | None = None) -> tuple[Any, ...]:
    """This process's part of equally long arrays (numpy, or anything sliceable with a
    ``len``): elements index, index+count... of the first ``count * (len // count)``, so that
    every shard has the same length (Keras 3 on JAX: the processes of one collective must take
    the same steps; ``orchestrator.steps.keras_fit_steps`` counts them)."""
    shard = shard or current_shard()
    lengths = {len(a) for a in arrays}
    if len(lengths) != 1:
        raise ValueError(f"arrays of different lengths {sorted(lengths)}: shard them apart")
    (length,) = lengths
    if length < shard.count:
        raise ValueError(f"{length} examples for {shard.count} shards: shard "
                         f"{length} would read nothing")
    usable = length - length % shard.count
    announce("shard_arrays", shard)
    return tuple(a[shard.index:usable:shard.count] for a in arrays)


def pss_dataset_fn(make_dataset: Callable[[], Any], batch_size: int, num_workers: int,
                   epochs: int | None = None, shuffle_buffer: int = 0,
                   seed: int = 0) -> Callable[..., Any]:
    """A dataset function for ``ClusterCoordinator.create_per_worker_dataset``.

    In ParameterServerStrategy the workers are the trainers (the chief only coordinates) and
    the strategy's own ``input_context`` says "1 pipeline" on every worker, so the worker's
    shard comes from ``tf.distribute.coordinator.experimental_get_current_worker_index()``
    (resolved on each worker when its copy is built) of ``num_workers`` shards.
    ``make_dataset()`` returns single examples; each worker reads its shard ``epochs`` times
    (for ever when None), batched by ``batch_size`` across epoch boundaries, so only a
    worker's very last batch can be partial. Steps per worker:
    ``orchestrator.steps.shard_sizes`` with the workers as shards.
    """
    if num_workers < 1:
        raise ValueError(f"num_workers must be at least 1, got {num_workers}")

    def dataset_fn(_input_context: Any = None) -> Any:
        import tensorflow as tf

        announce(f"pss_dataset_fn, {num_workers} workers")
        dataset = make_dataset()
        if num_workers > 1:
            index = tf.distribute.coordinator.experimental_get_current_worker_index()
            dataset = dataset.shard(num_workers, index)
        if shuffle_buffer:
            dataset = dataset.shuffle(shuffle_buffer, seed=seed)
        return dataset.repeat(epochs).batch(batch_size).prefetch(2)

    return dataset_fn


def mwms_data_sharding(dataset: Any) -> Any:
    """``dataset`` with ``AutoShardPolicy.DATA``, for ``strategy.experimental_distribute_dataset``
    under MultiWorkerMirroredStrategy (see the module docstring)."""
    import tensorflow as tf

    announce("mwms_data_sharding: AutoShardPolicy.DATA")
    options = tf.data.Options()
    options.experimental_distribute.auto_shard_policy = tf.data.experimental.AutoShardPolicy.DATA
    return dataset.with_options(options)
