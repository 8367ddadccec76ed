"""An Estimator job whose input repeats for ever and that sets no max_steps of its own:
only the launcher's coordinator can end it (at the spec's max_steps).

Checkpoints every SAVE_STEPS global steps (env, default 100); no worker start delay."""

import os

import numpy as np
import tensorflow as tf


def input_fn():
    rng = np.random.default_rng(int(os.environ.get("TFCLUSTER_SHARD_INDEX", "0")))
    x = rng.normal(size=(512, 4)).astype("float32")
    y = (x @ np.array([1.0, -2.0, 0.5, 3.0], dtype="float32")).reshape(-1, 1)
    return tf.data.Dataset.from_tensor_slices(({"x": x}, y)).repeat().batch(16)


def main():
    config = tf.estimator.RunConfig(
        model_dir=os.environ["TFCLUSTER_MODEL_DIR"],
        save_checkpoints_steps=int(os.environ.get("SAVE_STEPS", "100")),
        save_checkpoints_secs=None, keep_checkpoint_max=3, log_step_count_steps=1000,
        experimental_max_worker_delay_secs=0)
    est = tf.estimator.LinearRegressor([tf.feature_column.numeric_column("x", shape=4)],
                                       config=config)
    tf.estimator.train_and_evaluate(
        est, tf.estimator.TrainSpec(input_fn, max_steps=None),   # no max_steps: for ever
        tf.estimator.EvalSpec(input_fn, steps=1, throttle_secs=3600))


if __name__ == "__main__":
    main()
