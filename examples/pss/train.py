"""ParameterServerStrategy job on synthetic CTR data (TensorFlow 2.21), custom training loop.

One script for every task. Workers and ps only serve (``tf.distribute.Server.join``); the
chief is the coordinator: it builds the model on the ps, gives every worker its shard of the
data (``create_per_worker_dataset`` with ``orchestrator.sharding.pss_dataset_fn``), schedules
training steps on the workers and saves checkpoints ``ckpt-STEP`` into the model_dir. Keras 3's
``model.fit`` refuses ParameterServerStrategy, hence the loop. Run with TF 2.21's python:

    launch cluster_specs/pss.json -- .venv-tf2/bin/python examples/pss/train.py

Given in epochs (spec: epochs, examples, batch_size), each example is trained on exactly
``epochs`` times by the whole cluster and the final checkpoint's step is the sum of every
worker's steps (``orchestrator.epochs.pss_run``); given max_steps, it trains that many steps.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

HERE = Path(__file__).resolve()
sys.path.insert(0, str(HERE.parents[1]))

import ctr_data  # noqa: E402
from ctr_model import CtrModel  # noqa: E402

from orchestrator.epochs import epoch_plan, pss_run, pss_step_fn  # noqa: E402
from orchestrator.sharding import pss_dataset_fn  # noqa: E402

DEFAULT_EXAMPLES = 20000


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--model-dir", default=os.environ.get("TFCLUSTER_MODEL_DIR", "runs/pss/model"))
    p.add_argument("--data-dir", default=ctr_data.default_dir())
    p.add_argument("--batch-size", type=int, default=64, help="when the spec gives none")
    p.add_argument("--max-steps", type=int, default=1000, help="when the launcher gives none")
    p.add_argument("--steps-per-call", type=int, default=10,
                   help="training steps in one scheduled function")
    p.add_argument("--save-steps", type=int, default=200)
    p.add_argument("--log-ids", action="store_true",
                   help="workers print the ids of every batch they train on (tests)")
    p.add_argument("--no-helpers", action="store_true",
                   help="what a script without tfcluster does: every worker reads all the data "
                        "and the coordinator runs until every input ended (tests)")
    return p.parse_args(argv)


def serve(task_type: str, task_index: int) -> None:
    """Workers and ps: serve the coordinator until the launcher stops this process."""
    import tensorflow as tf

    os.environ.setdefault("GRPC_FAIL_FAST", "use_caller")
    resolver = tf.distribute.cluster_resolver.TFConfigClusterResolver()
    server = tf.distribute.Server(resolver.cluster_spec(), job_name=task_type,
                                  task_index=task_index, protocol="grpc", start=True)
    server.join()


def coordinate(args: argparse.Namespace) -> None:
    import tensorflow as tf

    plan = epoch_plan(batch_size=args.batch_size, max_steps=args.max_steps)
    train_file = ctr_data.ensure(args.data_dir, "train", plan.examples or DEFAULT_EXAMPLES, 1)
    resolver = tf.distribute.cluster_resolver.TFConfigClusterResolver()
    num_workers = len(resolver.cluster_spec().as_dict().get("worker", []))
    strategy = tf.distribute.ParameterServerStrategy(resolver)
    coordinator = tf.distribute.coordinator.ClusterCoordinator(strategy)

    with strategy.scope():
        model = CtrModel()
    manager = tf.train.CheckpointManager(model.checkpoint(), args.model_dir, max_to_keep=100)
    if manager.latest_checkpoint:
        manager.checkpoint.restore(manager.latest_checkpoint)

    counted = plan.counted and not args.no_helpers
    epochs = plan.epochs if plan.counted else None
    if args.no_helpers:
        def dataset_fn():
            return ctr_data.read_csv(train_file).repeat(epochs).batch(plan.batch_size)
    else:
        dataset_fn = pss_dataset_fn(lambda: ctr_data.read_csv(train_file), plan.batch_size,
                                    num_workers, epochs)
    iterator = iter(coordinator.create_per_worker_dataset(dataset_fn))

    def train_batch(batch):
        features, labels = batch
        if args.log_ids:
            tf.print("tfcluster-ids:", features["id"], summarize=-1)
        strategy.run(model.train_step, args=(features, labels))

    if counted:
        total = plan.total_steps(num_trainers=num_workers)   # the workers are the trainers
    else:
        total = None if plan.counted else plan.max_steps     # None: until every input ended
    last_saved = [int(model.step.numpy())]

    def on_round(step: int) -> None:
        if step - last_saved[0] >= args.save_steps:
            manager.save(checkpoint_number=step)
            last_saved[0] = step

    step = pss_run(coordinator, pss_step_fn(train_batch), iterator, total,
                   input_ends=plan.counted,
                   start_step=last_saved[0], steps_per_call=args.steps_per_call,
                   calls_per_round=2 * num_workers, on_round=on_round,
                   idle_rounds=20)
    stored = int(model.step.numpy())
    path = manager.save(checkpoint_number=stored)
    print(f"tfcluster: trained to step {step} (global_step {stored}); saved {path}", flush=True)


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    task = json.loads(os.environ.get("TF_CONFIG", "{}")).get("task", {})
    if task.get("type") in ("worker", "ps"):
        serve(task["type"], int(task.get("index", 0)))
    else:
        coordinate(args)


if __name__ == "__main__":
    main()
