"""TensorFlow's "Multi-worker training with Keras" tutorial (tensorflow/docs,
site/en/tutorials/distribute/multi_worker_with_keras.ipynb, Apache-2.0: its
``mnist_setup.py`` and ``main.py``), TensorFlow 2.21 with tf_keras: every task runs it,
MultiWorkerMirroredStrategy, ``model.fit(epochs=3, steps_per_epoch=70)`` with Keras'
progress bar, then ``model.save`` as the tutorial's "Model saving" section writes it (the
chief into the model's path, the others into a temporary directory they delete).

Changed, and only these: data are MNIST-shaped random images (no download in CI); the
save path is under ``$TFCLUSTER_MODEL_DIR`` (the tutorial's is /tmp/keras-model).
"""

import json
import os

os.environ.setdefault("TF_USE_LEGACY_KERAS", "1")

import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402


def mnist_dataset(batch_size):
    rng = np.random.default_rng(0)
    x_train = rng.integers(0, 256, (6000, 28, 28), dtype=np.uint8)
    y_train = rng.integers(0, 10, 6000, dtype=np.int64)
    # The `x` arrays are in uint8 and have values in the [0, 255] range.
    # You need to convert them to float32 with values in the [0, 1] range.
    x_train = x_train / np.float32(255)
    train_dataset = tf.data.Dataset.from_tensor_slices(
        (x_train, y_train)).shuffle(60000).repeat().batch(batch_size)
    return train_dataset


def build_and_compile_cnn_model():
    model = tf.keras.Sequential([
        tf.keras.layers.InputLayer(input_shape=(28, 28)),
        tf.keras.layers.Reshape(target_shape=(28, 28, 1)),
        tf.keras.layers.Conv2D(32, 3, activation='relu'),
        tf.keras.layers.Flatten(),
        tf.keras.layers.Dense(128, activation='relu'),
        tf.keras.layers.Dense(10)
    ])
    model.compile(
        loss=tf.keras.losses.SparseCategoricalCrossentropy(from_logits=True),
        optimizer=tf.keras.optimizers.SGD(learning_rate=0.001),
        metrics=['accuracy'])
    return model


per_worker_batch_size = 64
tf_config = json.loads(os.environ['TF_CONFIG'])
num_workers = len(tf_config['cluster'].get('chief', [])) + \
    len(tf_config['cluster'].get('worker', []))

strategy = tf.distribute.MultiWorkerMirroredStrategy()

global_batch_size = per_worker_batch_size * num_workers
multi_worker_dataset = mnist_dataset(global_batch_size)

with strategy.scope():
    # Model building/compiling need to be within `strategy.scope()`.
    multi_worker_model = build_and_compile_cnn_model()

multi_worker_model.fit(multi_worker_dataset, epochs=3, steps_per_epoch=70)

model_path = os.path.join(os.environ["TFCLUSTER_MODEL_DIR"], "keras-model")


def _is_chief(task_type, task_id):
    # Note: there are two possible `TF_CONFIG` configurations.
    #   1) In addition to `worker` tasks, a `chief` task type is use;
    #      in this case, the `chief` task should be assigned the task of saving the model.
    #   2) There is only `worker` tasks; in this case, the `worker` task with
    #      `task_id` 0 is the chief.
    return (task_type == 'chief') or (task_type == 'worker' and task_id == 0) or \
        task_type is None


def _get_temp_dir(dirpath, task_id):
    base_dirpath = 'workertemp_' + str(task_id)
    temp_dir = os.path.join(dirpath, base_dirpath)
    tf.io.gfile.makedirs(temp_dir)
    return temp_dir


def write_filepath(filepath, task_type, task_id):
    dirpath = os.path.dirname(filepath)
    base = os.path.basename(filepath)
    if not _is_chief(task_type, task_id):
        dirpath = _get_temp_dir(dirpath, task_id)
    return os.path.join(dirpath, base)


task_type, task_id = (strategy.cluster_resolver.task_type,
                      strategy.cluster_resolver.task_id)
write_model_path = write_filepath(model_path, task_type, task_id)
multi_worker_model.save(write_model_path)
if not _is_chief(task_type, task_id):
    tf.io.gfile.rmtree(os.path.dirname(write_model_path))
