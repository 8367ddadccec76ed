"""A small Estimator job (TensorFlow 2.15) for the fault suite: chief, workers, ps, evaluator.

Training is paced (FAULT_STEP_SLEEP seconds per step on each trainer) so that kills land in
the middle of it; every FAULT_PRINT_EVERY global steps a trainer prints
``tfjob-progress step=N`` (the campaign times these lines). The chief saves a checkpoint
every FAULT_SAVE_STEPS steps; a restarted task restores the newest one from model_dir, as
every Estimator does. FAULT_PS_DELAY makes the ps wait that many seconds before it starts.
"""

import json
import os
import sys
import time

if os.environ.get("FAULT_PS_DELAY") and json.loads(os.environ["TF_CONFIG"])["task"]["type"] \
        == "ps":
    time.sleep(float(os.environ["FAULT_PS_DELAY"]))    # a ps whose host is slow to start it

import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", ".."))
from orchestrator.epochs import wait_for_chief_init  # noqa: E402

MODEL_DIR = os.environ["TFCLUSTER_MODEL_DIR"]
MAX_STEPS = int(os.environ["TFCLUSTER_MAX_STEPS"])
SAVE_STEPS = int(os.environ.get("FAULT_SAVE_STEPS", "100"))
SLEEP = float(os.environ.get("FAULT_STEP_SLEEP", "0.01"))
PRINT_EVERY = int(os.environ.get("FAULT_PRINT_EVERY", "20"))
TASK = json.loads(os.environ["TF_CONFIG"])["task"]


def input_fn():
    rng = np.random.default_rng(7 + TASK["index"])
    x = rng.normal(size=(2048, 8)).astype("float32")
    y = (x @ np.arange(1, 9, dtype="float32") > 0).astype("int32")
    return tf.data.Dataset.from_tensor_slices(({"x": x}, y)).repeat().batch(32)


class Pace(tf.estimator.SessionRunHook):
    """Slow the trainer down and report the global step."""

    def begin(self):
        self.global_step = tf.compat.v1.train.get_global_step()
        self.last = -1

    def before_run(self, run_context):
        return tf.estimator.SessionRunArgs(self.global_step)

    def after_run(self, run_context, run_values):
        step = int(run_values.results)
        if self.last < 0 or step // PRINT_EVERY != self.last // PRINT_EVERY:
            print(f"tfjob-progress step={step}", flush=True)
        self.last = step
        time.sleep(SLEEP)


class EvalReport(tf.estimator.SessionRunHook):
    """The evaluator reports each checkpoint it evaluated."""

    def begin(self):
        self.global_step = tf.compat.v1.train.get_global_step()

    def end(self, session):
        print(f"tfjob-eval step={int(session.run(self.global_step))}", flush=True)


def main():
    print("tfjob-start", flush=True)
    config = tf.estimator.RunConfig(
        model_dir=MODEL_DIR, save_checkpoints_steps=SAVE_STEPS, save_checkpoints_secs=None,
        keep_checkpoint_max=1000, log_step_count_steps=1000,
        experimental_max_worker_delay_secs=0)
    estimator = tf.estimator.LinearClassifier(
        [tf.feature_column.numeric_column("x", shape=(8,))], config=config)
    train_spec = tf.estimator.TrainSpec(input_fn, max_steps=MAX_STEPS, hooks=[Pace()])
    eval_spec = tf.estimator.EvalSpec(input_fn, steps=5, start_delay_secs=0, throttle_secs=1,
                                      hooks=[EvalReport()])
    if TASK["type"] == "worker":
        wait_for_chief_init(MODEL_DIR)
    tf.estimator.train_and_evaluate(estimator, train_spec, eval_spec)


if __name__ == "__main__":
    main()
