"""TensorFlow's "Multi-worker training with Estimator" tutorial (tensorflow/docs,
site/en/tutorials/distribute/multi_worker_with_estimator.ipynb, Apache-2.0), as a user runs
it with the launcher: TensorFlow 2.15, MultiWorkerMirroredStrategy, every task runs it.

Kept as the tutorial writes it: eager execution disabled, the Keras model_fn, the input
sharded by ``input_context``, no ``max_steps`` (each worker trains until its shard ends),
``RunConfig(train_distribute=strategy)`` with its defaults (a checkpoint every 600 s: the
first and the last only), and ``model_dir='/tmp/multiworker'`` hard-coded, which is not the
spec's model_dir. Changed, and only these:
- the tutorial sets ``TF_CONFIG`` itself for two workers on fixed ports: the launcher gives
  each task its own, so that line is left out;
- data: MNIST-shaped random images (``ROWS`` of them, 60,000 by default; no download in
  CI) instead of ``tfds.load('mnist')``.
"""

import os

import numpy as np
import tensorflow as tf

tf.compat.v1.disable_eager_execution()

BUFFER_SIZE = 10000
BATCH_SIZE = 64
ROWS = int(os.environ.get("ROWS", "60000"))


def mnist():
    rng = np.random.default_rng(0)
    images = rng.integers(0, 256, (ROWS, 28, 28, 1), dtype=np.uint8)
    labels = rng.integers(0, 10, ROWS, dtype=np.int64)
    return tf.data.Dataset.from_tensor_slices((images, labels))


def input_fn(mode, input_context=None):
    mnist_dataset = mnist()

    def scale(image, label):
        image = tf.cast(image, tf.float32)
        image /= 255
        return image, label

    if input_context:
        mnist_dataset = mnist_dataset.shard(input_context.num_input_pipelines,
                                            input_context.input_pipeline_id)
    return mnist_dataset.map(scale).cache().shuffle(BUFFER_SIZE).batch(BATCH_SIZE)


LEARNING_RATE = 1e-4


def model_fn(features, labels, mode):
    model = tf.keras.Sequential([
        tf.keras.layers.Conv2D(32, 3, activation='relu', input_shape=(28, 28, 1)),
        tf.keras.layers.MaxPooling2D(),
        tf.keras.layers.Flatten(),
        tf.keras.layers.Dense(64, activation='relu'),
        tf.keras.layers.Dense(10)
    ])
    logits = model(features, training=False)

    if mode == tf.estimator.ModeKeys.PREDICT:
        predictions = {'logits': logits}
        return tf.estimator.EstimatorSpec(labels=labels, predictions=predictions)

    optimizer = tf.compat.v1.train.GradientDescentOptimizer(
        learning_rate=LEARNING_RATE)
    loss = tf.keras.losses.SparseCategoricalCrossentropy(
        from_logits=True, reduction=tf.keras.losses.Reduction.NONE)(labels, logits)
    loss = tf.reduce_sum(loss) * (1. / BATCH_SIZE)
    if mode == tf.estimator.ModeKeys.EVAL:
        return tf.estimator.EstimatorSpec(mode, loss=loss)

    return tf.estimator.EstimatorSpec(
        mode=mode,
        loss=loss,
        train_op=optimizer.minimize(
            loss, tf.compat.v1.train.get_or_create_global_step()))


strategy = tf.distribute.experimental.MultiWorkerMirroredStrategy()

config = tf.estimator.RunConfig(train_distribute=strategy)

classifier = tf.estimator.Estimator(
    model_fn=model_fn, model_dir='/tmp/multiworker', config=config)
tf.estimator.train_and_evaluate(
    classifier,
    train_spec=tf.estimator.TrainSpec(input_fn=input_fn),
    eval_spec=tf.estimator.EvalSpec(input_fn=input_fn)
)
