"""A stock Estimator script as users write it (TensorFlow 2.15), the issue's: ``RunConfig``
defaults (a checkpoint every 600 s), an input that repeats, ``train_and_evaluate`` with no
``max_steps`` in its ``TrainSpec`` (the spec gives it), nothing that saves on a signal.
Changed for the test budget only: ``EvalSpec(start_delay_secs=1, throttle_secs=1)``
(TensorFlow's 120 s and 600 s; EVAL_DELAY / EVAL_THROTTLE give others)."""

import os

import numpy as np
import tensorflow as tf

tf.compat.v1.logging.set_verbosity(tf.compat.v1.logging.INFO)


def input_fn():
    x = np.random.default_rng(0).normal(size=(1024, 4)).astype("float32")
    y = (x.sum(axis=1) > 0).astype("int32")
    return tf.data.Dataset.from_tensor_slices(({"x": x}, y)).repeat().batch(32)


estimator = tf.estimator.LinearClassifier([tf.feature_column.numeric_column("x", shape=(4,))],
                                          config=tf.estimator.RunConfig())
tf.estimator.train_and_evaluate(
    estimator, tf.estimator.TrainSpec(input_fn),
    tf.estimator.EvalSpec(input_fn, steps=5,
                          start_delay_secs=int(os.environ.get("EVAL_DELAY", "1")),
                          throttle_secs=int(os.environ.get("EVAL_THROTTLE", "1"))))
