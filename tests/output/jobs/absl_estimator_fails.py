"""A user's Estimator script run with absl (verbosity INFO, so TensorFlow logs every record
twice, once in absl's format, "Using config: {...}" over several lines), which trains a few
steps, prints, and then fails inside TensorFlow because of its own mistake in
build_features (the line marked so)."""

import os

import tensorflow as tf
from absl import app, logging


def input_fn():
    data = ({"x": [[1.0], [2.0]]}, [[0], [1]])
    return tf.data.Dataset.from_tensor_slices(data).repeat().batch(2)


def build_features(rows):
    return tf.constant(rows, dtype=tf.float32)      # USER-MISTAKE: ragged rows


def main(_):
    logging.set_verbosity(logging.INFO)
    estimator = tf.estimator.LinearClassifier([tf.feature_column.numeric_column("x")])
    estimator.train(input_fn, max_steps=int(os.environ["TFCLUSTER_MAX_STEPS"]))
    print("my own print after training", flush=True)
    build_features([[1.0, 2.0], [3.0]])


if __name__ == "__main__":
    app.run(main)
