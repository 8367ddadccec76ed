"""MultiWorkerMirroredStrategy job on synthetic CTR data (TensorFlow 2.21), custom loop.

Synchronous data parallelism: the chief and every worker train the same model, each step on
its part of one global batch, gradients summed over all of them. No ps. Run with TF 2.21:

    launch cluster_specs/mwms.json

TensorFlow shards the input itself (``AutoShardPolicy.DATA``, see orchestrator.sharding):
each task keeps its part of every global batch, so one pass over the dataset is one epoch for
the whole cluster, and the distributed iterator ends on every task at once. Every task saves
checkpoints (the save is collective); only the chief's go to the model_dir.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve()
sys.path.insert(0, str(HERE.parents[1]))

import ctr_data  # noqa: E402
from ctr_model import CtrModel  # noqa: E402

from orchestrator.epochs import epoch_plan  # noqa: E402
from orchestrator.sharding import mwms_data_sharding  # noqa: E402

DEFAULT_EXAMPLES = 20000


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--model-dir", default=os.environ.get("TFCLUSTER_MODEL_DIR",
                                                         "runs/mwms/model"))
    p.add_argument("--data-dir", default=ctr_data.default_dir())
    p.add_argument("--batch-size", type=int, default=64, help="per task, when the spec gives none")
    p.add_argument("--max-steps", type=int, default=500, help="when the launcher gives none")
    p.add_argument("--save-steps", type=int, default=100)
    p.add_argument("--log-ids", action="store_true",
                   help="print the ids of every batch this task trains on (tests)")
    return p.parse_args(argv)


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)                   # first: --help answers without TensorFlow
    import tensorflow as tf

    plan = epoch_plan(batch_size=args.batch_size, max_steps=args.max_steps)
    train_file = ctr_data.ensure(args.data_dir, "train", plan.examples or DEFAULT_EXAMPLES, 1)
    task = json.loads(os.environ.get("TF_CONFIG", "{}")).get("task", {})
    is_chief = task.get("type", "chief") == "chief"

    strategy = tf.distribute.MultiWorkerMirroredStrategy()
    global_batch = plan.batch_size * strategy.num_replicas_in_sync
    dataset = ctr_data.read_csv(train_file).repeat(plan.epochs if plan.counted else None)
    dataset = mwms_data_sharding(dataset.batch(global_batch))
    batches = strategy.experimental_distribute_dataset(dataset)

    with strategy.scope():
        model = CtrModel(mirrored=True)
    checkpoint = model.checkpoint()
    latest = tf.train.latest_checkpoint(args.model_dir)
    if latest:
        checkpoint.restore(latest)
    # Every task must take part in a save; the others write to a scratch dir, then drop it.
    save_dir = args.model_dir if is_chief else tempfile.mkdtemp(prefix="mwms-ckpt-")
    manager = tf.train.CheckpointManager(checkpoint, save_dir, max_to_keep=100)

    def replica_step(features, labels):
        if args.log_ids:
            tf.print("tfcluster-ids:", features["id"], summarize=-1)
        return model.train_step(features, labels, global_batch_size=global_batch)

    @tf.function
    def train_step(batch):
        features, labels = batch
        losses = strategy.run(replica_step, args=(features, labels))
        return strategy.reduce(tf.distribute.ReduceOp.SUM, losses, axis=None)

    step = int(model.step.numpy())
    for batch in batches:
        if not plan.counted and step >= plan.max_steps:
            break
        loss = train_step(batch)
        step = int(model.step.numpy())
        if step % args.save_steps == 0:
            manager.save(checkpoint_number=step)
            print(f"step {step}: loss {float(loss):.4f}", flush=True)
    path = manager.save(checkpoint_number=step)
    if is_chief:
        print(f"tfcluster: trained to step {step}; saved {path}", flush=True)
    else:
        shutil.rmtree(save_dir, ignore_errors=True)


if __name__ == "__main__":
    main()
