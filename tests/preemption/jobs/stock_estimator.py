"""An Estimator job as users write it (TensorFlow 2.15): ``RunConfig()``'s defaults (a
checkpoint every 600 s), an input that repeats, ``train_and_evaluate``, nothing that saves
on a signal. One addition: PACE_SECS of sleep per step, so that a notice lands mid-training
(it saves nothing and stops nothing)."""

import os
import time

import numpy as np
import tensorflow as tf

tf.compat.v1.logging.set_verbosity(tf.compat.v1.logging.INFO)
PACE = float(os.environ.get("PACE_SECS", "0.02"))


def input_fn():
    x = np.random.default_rng(0).normal(size=(1024, 4)).astype("float32")
    y = (x.sum(axis=1) > 0).astype("int32")
    return tf.data.Dataset.from_tensor_slices(({"x": x}, y)).repeat().batch(32)


class Pace(tf.estimator.SessionRunHook):
    def after_run(self, run_context, run_values):
        time.sleep(PACE)


# LOG_STEPS (bench/preemption.py): the chief logs its step more often than RunConfig's 100
config = tf.estimator.RunConfig(**({"log_step_count_steps": int(os.environ["LOG_STEPS"])}
                                   if os.environ.get("LOG_STEPS") else {}))
estimator = tf.estimator.LinearClassifier([tf.feature_column.numeric_column("x", shape=(4,))],
                                          config=config)
tf.estimator.train_and_evaluate(
    estimator,
    tf.estimator.TrainSpec(input_fn, max_steps=int(os.environ["TFCLUSTER_MAX_STEPS"]),
                           hooks=[Pace()]),
    tf.estimator.EvalSpec(input_fn, steps=5))
