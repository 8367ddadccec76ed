"""Estimator train_and_evaluate on synthetic CTR data (TensorFlow 2.15).

One script for every task: TF_CONFIG (set by the launcher) says whether this process is the
chief, a worker, a ps or the evaluator. Run the whole cluster with

    launch cluster_specs/estimator.json

The job is given in epochs (spec: epochs, examples, batch_size): each trainer reads its shard
(orchestrator.sharding) so the cluster sees every example exactly `epochs` times, and the chief
saves the final checkpoint only after every trainer's last step (orchestrator.epochs). Data is
generated into data/ on first use (examples/ctr_data.py).
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

from orchestrator.epochs import (  # noqa: E402
    EpochPlan,
    epoch_plan,
    estimator_hooks,
    training_dataset,
    wait_for_chief_init,
)

DEFAULT_EXAMPLES = 20000
EVAL_EXAMPLES = 2000


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--model-dir", default=os.environ.get("TFCLUSTER_MODEL_DIR",
                                                         "runs/estimator/model"))
    p.add_argument("--data-dir", default=ctr_data.default_dir())
    p.add_argument("--batch-size", type=int, default=100,
                   help="when the spec gives no batch_size")
    p.add_argument("--max-steps", type=int, default=2000,
                   help="when the launcher gives no TFCLUSTER_MAX_STEPS")
    p.add_argument("--save-steps", type=int, default=200)
    p.add_argument("--log-ids", action="store_true",
                   help="print the ids of every batch this task trains on (tests)")
    p.add_argument("--no-helpers", action="store_true",
                   help="what a script without tfcluster does: every trainer reads all the data, "
                        "max_steps None, the chief saves when its own input ends (tests)")
    return p.parse_args(argv)


def feature_columns():
    import tensorflow as tf

    fc = tf.feature_column
    numeric = [fc.numeric_column(name) for name in ctr_data.NUMERIC]
    device = fc.categorical_column_with_vocabulary_list("device", ctr_data.DEVICES)
    site = fc.categorical_column_with_vocabulary_list("site", ctr_data.SITES)
    return numeric + [device, site]


def serving_input_fn():
    """Raw features in, for the SavedModel the evaluator exports at the end."""
    import tensorflow as tf

    spec = {n: tf.io.FixedLenFeature([], tf.float32) for n in ctr_data.NUMERIC}
    spec.update({n: tf.io.FixedLenFeature([], tf.string) for n in ("device", "site")})
    return tf.estimator.export.build_parsing_serving_input_receiver_fn(spec)()


def with_id_logging(estimator, config):
    """The same model, printing ``tfcluster-ids: [...]`` for every batch it trains on."""
    import tensorflow as tf

    class PrintIds(tf.compat.v1.train.SessionRunHook):
        def __init__(self, ids):
            self.ids = ids

        def before_run(self, run_context):
            return tf.compat.v1.train.SessionRunArgs(self.ids)

        def after_run(self, run_context, run_values):
            print("tfcluster-ids: [" + " ".join(map(str, run_values.results)) + "]", flush=True)

    def model_fn(features, labels, mode, config):
        spec = estimator.model_fn(features, labels, mode, config)
        if mode != tf.estimator.ModeKeys.TRAIN:
            return spec
        return spec._replace(training_hooks=[*spec.training_hooks, PrintIds(features["id"])])

    return tf.estimator.Estimator(model_fn, config=config)


def run_evaluator(estimator, train_spec, eval_spec) -> None:
    """The evaluator task: evaluate every new checkpoint afresh (orchestrator.evaluation) on
    the eval data and on 10 batches of training data, one line per checkpoint and split in
    model_dir/tfcluster_metrics.jsonl, until the one at max_steps; then export it."""
    from orchestrator.evaluation import evaluate_estimator_checkpoints

    evaluate_estimator_checkpoints(
        estimator, eval_spec.input_fn, train_spec.input_fn, eval_steps=eval_spec.steps,
        train_steps=10, max_steps=train_spec.max_steps, exporters=eval_spec.exporters)


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)                   # first: --help answers without TensorFlow
    import tensorflow as tf

    tf.get_logger().setLevel("INFO")
    plan: EpochPlan = epoch_plan(batch_size=args.batch_size, max_steps=args.max_steps)
    train_file = ctr_data.ensure(args.data_dir, "train", plan.examples or DEFAULT_EXAMPLES, 1)
    eval_file = ctr_data.ensure(args.data_dir, "eval", EVAL_EXAMPLES, 2)
    task = json.loads(os.environ.get("TF_CONFIG", "{}")).get("task", {})
    task_type = task.get("type", "chief")

    config = tf.estimator.RunConfig(
        model_dir=args.model_dir,
        save_checkpoints_steps=args.save_steps,
        keep_checkpoint_max=100,              # never delete a checkpoint under the evaluator
        log_step_count_steps=200,
        experimental_max_worker_delay_secs=0,  # workers wait for the chief instead (below)
    )
    estimator = tf.estimator.LinearClassifier(feature_columns(), config=config)
    if args.log_ids:
        estimator = with_id_logging(estimator, config)

    def train_input_fn():
        if args.no_helpers:
            return ctr_data.read_csv(train_file).repeat(plan.epochs).batch(plan.batch_size)
        return training_dataset(ctr_data.read_csv(train_file), plan, shuffle_buffer=1000)

    def eval_input_fn():
        return ctr_data.read_csv(eval_file).batch(500)

    max_steps = plan.total_steps() if plan.counted else plan.max_steps
    hooks = estimator_hooks(plan, args.model_dir, config.is_chief, args.save_steps)
    if args.no_helpers:
        max_steps, hooks = None, []
    train_spec = tf.estimator.TrainSpec(train_input_fn, max_steps=max_steps, hooks=hooks)
    exporter = tf.estimator.FinalExporter("ctr", serving_input_fn)
    eval_spec = tf.estimator.EvalSpec(eval_input_fn, steps=None, exporters=[exporter],
                                      start_delay_secs=0, throttle_secs=1)
    if task_type == "evaluator":
        run_evaluator(estimator, train_spec, eval_spec)
        return
    if task_type == "worker":
        wait_for_chief_init(args.model_dir)
    tf.estimator.train_and_evaluate(estimator, train_spec, eval_spec)


if __name__ == "__main__":
    main()
