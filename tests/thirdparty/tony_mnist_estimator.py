"""TonY's distributed Estimator example (DNNClassifier on MNIST), as it runs here.

Provenance: tony-framework/TonY (formerly linkedin/TonY), tony-examples/mnist-tensorflow/
mnist_estimator_distributed.py (commit 9169c689abead399980a697bcd8820dbcb793337);
Apache-2.0, Copyright 2021 The TensorFlow Authors. Rewritten here, not copied.

What makes it a test: absl flags (``--model_dir`` default "output", ``--max_steps`` default
300000), ``DNNClassifier(model_dir=FLAGS.model_dir, config=RunConfig(...))`` with
``keep_checkpoint_max=3``, ``numpy_input_fn(num_epochs=500, shuffle=True)``,
``EvalSpec(steps=500, throttle_secs=60)``, and a chief that runs ``classifier.evaluate``
after ``train_and_evaluate`` (it stays alive past max_steps without training).

Changes:
- data: synthetic 28x28 "images" (2000 train, 500 eval rows) instead of
  ``tf.keras.datasets.mnist.load_data()`` (no download in CI); ``np.int`` (removed from
  NumPy 1.24) is ``int``; ``tf.keras.optimizers.Adagrad`` is
  ``tf.keras.optimizers.legacy.Adagrad`` (TF 2.15's canned Estimators refuse the new one);
- ``save_checkpoints_steps`` from SAVE_STEPS (default TonY's 1000) and
  ``EvalSpec(start_delay_secs=EVAL_DELAY, throttle_secs=EVAL_THROTTLE)`` (defaults
  TensorFlow's 120 s and TonY's 60 s): a CI job cannot wait two minutes for the first
  evaluation.
"""

import os

import numpy as np
import tensorflow as tf
from absl import app, flags, logging


def build_mnist():
    rng = np.random.default_rng(0)
    x_train = rng.integers(0, 256, (2000, 28, 28)).astype(int)
    y_train = (x_train[:, :14].sum(axis=(1, 2)) // 1000 % 10).astype(int)
    x_test = rng.integers(0, 256, (500, 28, 28)).astype(int)
    y_test = (x_test[:, :14].sum(axis=(1, 2)) // 1000 % 10).astype(int)
    return x_train, y_train, x_test, y_test


def build_config():
    return tf.estimator.RunConfig(
        keep_checkpoint_max=3,
        save_checkpoints_steps=int(os.environ.get("SAVE_STEPS", "1000")),
        save_summary_steps=500,
        log_step_count_steps=500)


def build_feature_columns():
    return [tf.feature_column.numeric_column("feature", shape=[28, 28])]


def build_classifier(feature_columns, run_config):
    return tf.estimator.DNNClassifier(
        feature_columns=feature_columns,
        hidden_units=[256, 128],
        optimizer=tf.keras.optimizers.legacy.Adagrad(learning_rate=FLAGS.learning_rate,
                                                      epsilon=1e-5),
        n_classes=10,
        dropout=FLAGS.dropout,
        model_dir=FLAGS.model_dir,
        config=run_config)


def build_input_fn(x_train, y_train, x_test, y_test):
    train_input_fn = tf.compat.v1.estimator.inputs.numpy_input_fn(
        {"feature": x_train}, y_train, batch_size=FLAGS.batch_size, shuffle=True,
        num_epochs=FLAGS.train_epoch)
    eval_input_fn = tf.compat.v1.estimator.inputs.numpy_input_fn(
        {"feature": x_test}, y_test, batch_size=FLAGS.batch_size, shuffle=False, num_epochs=1)
    return train_input_fn, eval_input_fn


def build_spec(train_input_fn, eval_input_fn):
    train_spec = tf.estimator.TrainSpec(input_fn=train_input_fn, max_steps=FLAGS.max_steps,
                                        hooks=[])
    eval_spec = tf.estimator.EvalSpec(
        input_fn=eval_input_fn, steps=500,
        start_delay_secs=float(os.environ.get("EVAL_DELAY", "120")),
        throttle_secs=float(os.environ.get("EVAL_THROTTLE", "60")))
    return train_spec, eval_spec


def main(argv):
    del argv
    logging.set_verbosity("INFO")
    run_config = build_config()
    x_train, y_train, x_test, y_test = build_mnist()
    classifier = build_classifier(build_feature_columns(), run_config)
    train_input_fn, eval_input_fn = build_input_fn(x_train, y_train, x_test, y_test)
    train_spec, eval_spec = build_spec(train_input_fn, eval_input_fn)
    tf.estimator.train_and_evaluate(classifier, train_spec, eval_spec)
    if run_config.task_type == "chief":
        classifier.evaluate(eval_input_fn)


if __name__ == "__main__":
    flags.DEFINE_string("model_dir", "output", "path of model output")
    flags.DEFINE_float("dropout", 0.5, "dropout of this model")
    flags.DEFINE_float("learning_rate", 0.001, "learning rate of this model")
    flags.DEFINE_integer("train_epoch", 500, "train epoch of this model")
    flags.DEFINE_integer("batch_size", 64, "batch size of this model")
    flags.DEFINE_integer("max_steps", 300000, "batch size of this model")
    FLAGS = flags.FLAGS
    app.run(main)
