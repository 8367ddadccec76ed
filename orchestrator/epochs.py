"""Epochs that mean epochs: each example consumed exactly ``epochs`` times by the whole
cluster, and a final checkpoint that holds every trainer's updates.

With ``epochs``, ``examples`` and ``batch_size`` in the spec the launcher gives every task
``TFCLUSTER_EPOCHS``, ``TFCLUSTER_EXAMPLES``, ``TFCLUSTER_BATCH_SIZE`` and the derived
``TFCLUSTER_MAX_STEPS`` (``orchestrator.steps.derive_max_steps``). The recipe:

1. every trainer reads only its shard, ``epochs`` times, batched across epoch boundaries
   (``training_dataset``): its input ends after exactly its share of the steps, whatever the
   shard sizes and the last partial batch;
2. in asynchronous training every trainer step adds one to global_step, so when the last
   trainer's input ends global_step is the derived total. The chief's input usually ends
   before that; ``estimator_hooks`` makes the chief wait for global_step to reach the total
   before its final save, so the last checkpoint holds every worker's steps (without it the
   chief exits first and the workers' last steps are lost);
3. ParameterServerStrategy: the coordinator schedules steps that end quietly on a worker
   whose input has ended (``pss_step_fn``) until the sum of steps done reaches the total
   (``pss_run``), then saves.

Without ``epochs`` in the spec the plan has only ``max_steps``: trainers read their shard for
ever and stop at max_steps, as TensorFlow does by default.
"""

from __future__ import annotations

import json
import logging
import os
import time
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Callable

from orchestrator.roles import TRAINERS
from orchestrator.sharding import INDEX_VAR, Shard, current_shard, shard_dataset
from orchestrator.steps import derive_max_steps, shard_steps

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class EpochPlan:
    """How much this task trains: counted epochs, or only max_steps."""

    shard: Shard
    epochs: int | None = None
    examples: int | None = None
    batch_size: int | None = None
    max_steps: int | None = None
    trainers: int | None = None     # tasks that read training data; default: shard.count

    @property
    def counted(self) -> bool:
        """True when the job is given in epochs (finite input, exact accounting)."""
        return None not in (self.epochs, self.examples, self.batch_size)

    def steps_of(self, shard: Shard) -> int:
        """Steps the trainer reading ``shard`` takes (its input's length in batches)."""
        return shard_steps(*self._counts(), shard.count)[shard.index]

    @property
    def shard_steps(self) -> int:
        """Steps this task takes."""
        return self.steps_of(self.shard)

    def total_steps(self, num_trainers: int | None = None) -> int:
        """global_step at the end: the sum of every trainer's steps (asynchronous training).

        The same on every task, the evaluator and ps included (they have no shard but know
        the trainers from TF_CONFIG); ParameterServerStrategy passes its worker count."""
        return derive_max_steps(*self._counts(),
                                num_trainers or self.trainers or self.shard.count)

    def _counts(self) -> tuple[int, int, int]:
        """(epochs, examples, batch_size) of a job given in epochs."""
        if self.epochs is None or self.examples is None or self.batch_size is None:
            raise ValueError("the job is not given in epochs (set epochs, examples and "
                             "batch_size in the spec)")
        return self.epochs, self.examples, self.batch_size


def _optional_int(env: Mapping[str, str], name: str) -> int | None:
    if not env.get(name):
        return None
    try:
        value = int(env[name])
    except ValueError:
        raise ValueError(f"{name}={env[name]!r} is not an integer") from None
    if value < 1:
        raise ValueError(f"{name} must be at least 1, got {value}")
    return value


def trainers_in_tf_config(env: Mapping[str, str]) -> int | None:
    """Chief/master and workers in TF_CONFIG's cluster (None without TF_CONFIG)."""
    try:
        cluster = json.loads(env.get("TF_CONFIG") or "{}").get("cluster") or {}
    except (ValueError, AttributeError):
        raise ValueError("TF_CONFIG is not a JSON object") from None
    count = sum(len(cluster.get(job) or []) for job in TRAINERS)
    return count or None


def epoch_plan(env: Mapping[str, str] | None = None, batch_size: int | None = None,
               max_steps: int | None = None) -> EpochPlan:
    """The plan from the task environment; ``batch_size`` / ``max_steps`` are defaults for a
    run without the launcher (the spec's values win)."""
    env = os.environ if env is None else env
    shard = current_shard(env)
    return EpochPlan(
        shard=shard,
        trainers=shard.count if INDEX_VAR in env else trainers_in_tf_config(env),
        epochs=_optional_int(env, "TFCLUSTER_EPOCHS"),
        examples=_optional_int(env, "TFCLUSTER_EXAMPLES"),
        batch_size=_optional_int(env, "TFCLUSTER_BATCH_SIZE") or batch_size,
        max_steps=_optional_int(env, "TFCLUSTER_MAX_STEPS") or max_steps,
    )


def training_dataset(examples: Any, plan: EpochPlan, shuffle_buffer: int = 0,
                     seed: int = 0) -> Any:
    """This trainer's input: its shard of ``examples`` (a dataset of single examples), read
    ``plan.epochs`` times (for ever without epochs), batched by ``plan.batch_size``."""
    if plan.batch_size is None:
        raise ValueError("no batch size: set batch_size in the spec or pass a default")
    dataset = shard_dataset(examples, plan.shard)
    if shuffle_buffer:
        dataset = dataset.shuffle(shuffle_buffer, seed=seed + plan.shard.index)
    return dataset.repeat(plan.epochs if plan.counted else None).batch(plan.batch_size)


# ---------------------------------------------------------------- Estimator (TF 2.15)

def wait_for_step(read_step: Callable[[], int], total: int, stall_timeout: float = 120.0,
                  poll: float = 0.2, clock: Callable[[], float] = time.monotonic,
                  sleep: Callable[[float], None] = time.sleep) -> int:
    """Poll ``read_step()`` until it reaches ``total``; give up when it has not moved for
    ``stall_timeout`` seconds (a trainer died, or the data holds fewer examples than the spec
    says). Returns the last step read."""
    step = read_step()
    moved_at = clock()
    while step < total and clock() - moved_at < stall_timeout:
        sleep(poll)
        now_step = read_step()
        if now_step != step:
            step, moved_at = now_step, clock()
    return step


def estimator_hooks(plan: EpochPlan, model_dir: str, is_chief: bool, save_steps: int,
                    stall_timeout: float = 120.0, poll: float = 0.2) -> list:
    """Hooks for ``TrainSpec(hooks=...)``: on the chief of a job given in epochs, wait until
    global_step reaches the total, then save the final checkpoint.

    They replace the Estimator's own CheckpointSaverHook (it sees one and adds none); the wait
    runs first, in ``end()``, so the chief's final save comes after every trainer's last
    step. Other tasks, and jobs given in max_steps, get no hooks. When global_step stops
    short of the total for ``stall_timeout`` seconds the chief saves what it has and says so.
    """
    if not (is_chief and plan.counted):
        return []
    import tensorflow as tf

    total = plan.total_steps()

    class WaitForAllTrainers(tf.compat.v1.train.SessionRunHook):
        def begin(self) -> None:
            self._step = tf.compat.v1.train.get_or_create_global_step()

        def end(self, session) -> None:
            step = session.run(self._step)
            if step < total:
                log.warning("tfcluster: chief's input ended at global step %d; waiting for "
                            "the other trainers to reach %d", step, total)
                step = wait_for_step(lambda: session.run(self._step), total, stall_timeout,
                                     poll)
            if step < total:
                log.warning("tfcluster: global step stuck at %d < %d for %.0fs (a trainer "
                            "failed, or fewer examples than the spec says); saving anyway",
                            step, total, stall_timeout)

    saver = tf.compat.v1.train.CheckpointSaverHook(model_dir, save_steps=save_steps)
    return [WaitForAllTrainers(), saver]


def wait_for_chief_init(model_dir: str, timeout: float = 300.0, poll: float = 0.2) -> bool:
    """On an Estimator worker: wait until the chief wrote its first checkpoint (it does so
    right after initialising the variables). A worker that asks for its session before that
    sleeps a hard-coded 30 s ("Waiting for model to be ready"). True when it appeared."""
    import tensorflow as tf

    path = f"{model_dir.rstrip('/')}/checkpoint"
    deadline = time.monotonic() + timeout
    while not tf.io.gfile.exists(path):
        if time.monotonic() > deadline:
            return False
        time.sleep(poll)
    return True


# ------------------------------------------------- ParameterServerStrategy (TF 2.21)

def pss_step_fn(train_batch: Callable[[Any], Any]) -> Callable[[Any, Any], Any]:
    """A ``tf.function(iterator, limit)`` for ``ClusterCoordinator.schedule``: train up to
    ``limit`` batches from this worker's iterator, fewer when its input has ended; returns
    how many it trained. ``train_batch(batch)`` runs one step (``strategy.run`` inside)."""
    import tensorflow as tf

    @tf.function
    def step_fn(iterator, limit):
        done = tf.constant(0, tf.int64)
        for _ in tf.range(limit):
            batch = iterator.get_next_as_optional()
            if not batch.has_value():
                break
            train_batch(batch.get_value())
            done += 1
        return done

    return step_fn


def pss_run(coordinator: Any, step_fn: Callable, iterator: Any, total_steps: int | None,
            input_ends: bool, start_step: int = 0, steps_per_call: int = 1,
            calls_per_round: int = 8, on_round: Callable[[int], None] | None = None,
            idle_rounds: int = 20) -> int:
    """Schedule ``step_fn`` until ``total_steps`` batches were trained; return the step.

    Each round schedules ``calls_per_round`` closures of at most ``steps_per_call`` steps,
    joins, and adds up what they did; ``on_round(step)`` then runs on the coordinator (save a
    checkpoint, log).

    ``input_ends``: every worker's input is finite (a job given in epochs). The count cannot
    overshoot then, whatever is scheduled: a worker whose input ended does nothing. So every
    round schedules all its closures, and a worker with data left gets some even when the
    closures often land on a worker that is done. ``total_steps`` None: run until every
    input ended. Without ``input_ends`` (input repeated for ever) a round never schedules
    more steps than remain, so the job stops exactly at ``total_steps``.

    When ``idle_rounds`` rounds in a row train nothing, every input has ended (short of the
    total: the data is smaller than the spec says, which is logged).
    """
    import tensorflow as tf

    if total_steps is None and not input_ends:
        raise ValueError("total_steps None needs input_ends: infinite input never ends")
    goal = total_steps if total_steps is not None else float("inf")
    step, idle = start_step, 0
    while step < goal:
        remaining, results = goal - step, []  # type: float, list
        while len(results) < calls_per_round and (input_ends or remaining > 0):
            limit = steps_per_call if input_ends else min(steps_per_call, remaining)
            results.append(coordinator.schedule(
                step_fn, args=(iterator, tf.constant(limit, tf.int64))))
            remaining -= limit
        coordinator.join()
        done = sum(int(r.fetch()) for r in results)
        step += done
        idle = 0 if done else idle + 1
        if on_round is not None:
            on_round(step)
        if idle >= idle_rounds:
            if total_steps is not None:
                log.warning("tfcluster: every worker's input ended at step %d of %d",
                            step, total_steps)
            break
    return step
