"""Kubeflow's Estimator example of a Keras model (TFJob), as it runs on TensorFlow 2.15.

Provenance: kubeflow/training-operator, examples/tensorflow/distribution_strategy/
estimator-API/keras_model_to_estimator.py (commit c3f04c3430933f8e89357b3d7e352e5a79785b7f);
Apache-2.0, Copyright 2018 The Kubeflow Authors. Rewritten here, not copied.

What makes it a test: a Keras model turned into an Estimator, an input of 1024 random rows
repeated 100 times (for ever, for a short job), ``TrainSpec(input_fn)`` without max_steps,
``EvalSpec(input_fn)``, model_dir from the command line.

Changes, each forced by TensorFlow 2.x or the test budget:
- ``tf.contrib.distribute`` (CollectiveAllReduceStrategy / MirroredStrategy in
  ``RunConfig(experimental_distribute=...)``) is gone since TF 2.0: plain RunConfig, i.e.
  TensorFlow's parameter-server training, which is what a ps in the cluster means;
- ``tf.train.GradientDescentOptimizer`` is ``tf.compat.v1.train.GradientDescentOptimizer``;
  ``tf.app.run`` / ``tf.logging`` are the compat.v1 ones;
- ``save_checkpoints_steps`` from SAVE_STEPS (default 50): RunConfig's default saves every
  600 s, so a short job would hold only the checkpoint at step 0;
- ``EvalSpec(start_delay_secs, throttle_secs)`` from EVAL_DELAY / EVAL_THROTTLE (default
  TensorFlow's 120 s and 600 s).
"""

import os
import sys

import numpy as np
import tensorflow as tf


def input_fn():
    x = np.random.random((1024, 10))
    y = np.random.randint(2, size=(1024, 1))
    x = tf.cast(x, tf.float32)
    dataset = tf.data.Dataset.from_tensor_slices((x, y))
    dataset = dataset.repeat(100)
    dataset = dataset.batch(32)
    return dataset


def main(args):
    if len(args) < 2:
        print("You must specify model_dir for checkpoints such as /tmp/tfkeras_example/.")
        return
    model_dir = args[1]
    print("Using %s to store checkpoints." % model_dir)  # noqa: UP031

    model = tf.keras.Sequential()
    model.add(tf.keras.layers.Dense(16, activation="relu", input_shape=(10,)))
    model.add(tf.keras.layers.Dense(1, activation="sigmoid"))
    optimizer = tf.compat.v1.train.GradientDescentOptimizer(0.2)
    model.compile(loss="binary_crossentropy", optimizer=optimizer)
    model.summary()
    tf.keras.backend.set_learning_phase(True)

    config = tf.estimator.RunConfig(save_checkpoints_steps=int(os.environ.get("SAVE_STEPS",
                                                                              "50")))
    keras_estimator = tf.keras.estimator.model_to_estimator(
        keras_model=model, config=config, model_dir=model_dir)
    tf.estimator.train_and_evaluate(
        keras_estimator,
        train_spec=tf.estimator.TrainSpec(input_fn=input_fn),
        eval_spec=tf.estimator.EvalSpec(
            input_fn=input_fn,
            start_delay_secs=float(os.environ.get("EVAL_DELAY", "120")),
            throttle_secs=float(os.environ.get("EVAL_THROTTLE", "600"))))


if __name__ == "__main__":
    tf.compat.v1.logging.set_verbosity(tf.compat.v1.logging.INFO)
    main(sys.argv)
