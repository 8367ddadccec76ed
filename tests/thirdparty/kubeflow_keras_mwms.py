"""Kubeflow's MultiWorkerMirroredStrategy example with Keras (TFJob), as it runs on
TensorFlow 2.15.

Provenance: kubeflow/training-operator, examples/tensorflow/distribution_strategy/
keras-API/multi_worker_strategy-with-keras.py (commit 25b8a5b57b3d7a0974c2ccd9ffbd03bca85698c0);
Apache-2.0, Copyright 2020 The Kubeflow Authors. Rewritten here, not copied.

What makes it a test: every worker trains ``fit(epochs, steps_per_epoch)`` in lockstep with
a per-epoch ``ModelCheckpoint(save_weights_only=True)`` into ``--checkpoint_dir``, and
then EVERY worker calls ``model.save(...)``: worker 0 into ``--saved_model_dir``, the others
into ``--saved_model_dir/worker_tmp_INDEX``. The save is collective (MWMS): a worker stopped
in the middle of it leaves its peers' saves hanging or cut.

Changes, each forced by the test bed or its budget:
- MNIST from tensorflow_datasets needs the network: random 28x28 images and labels
  (seeded), the same shapes, in a ``Dataset`` that is batched and repeated as theirs is;
- a smaller CNN (one convolution, fewer filters) and EPOCHS x STEPS from the environment
  (default 2 x 5) instead of 10 x 70;
- the TensorBoard callback writing into ``./logs`` (the working directory) is left out.
"""

import argparse
import json
import os

import numpy as np
import tensorflow as tf
from tensorflow.keras import layers, models


def make_datasets_unbatched():
    rng = np.random.default_rng(0)
    images = rng.random((512, 28, 28, 1), dtype=np.float32)
    labels = rng.integers(0, 10, 512)
    return tf.data.Dataset.from_tensor_slices((images, labels)).cache().shuffle(512)


def build_and_compile_cnn_model():
    model = models.Sequential()
    model.add(layers.Conv2D(8, (3, 3), activation="relu", input_shape=(28, 28, 1)))
    model.add(layers.MaxPooling2D((2, 2)))
    model.add(layers.Flatten())
    model.add(layers.Dense(16, activation="relu"))
    model.add(layers.Dense(10, activation="softmax"))
    model.compile(optimizer="adam", loss="sparse_categorical_crossentropy",
                  metrics=["accuracy"])
    return model


def decay(epoch):
    return 1e-3 if epoch < 3 else 1e-4


def main(args):
    strategy = tf.distribute.MultiWorkerMirroredStrategy()
    batch_size = 16 * strategy.num_replicas_in_sync
    with strategy.scope():
        ds_train = make_datasets_unbatched().batch(batch_size).repeat()
        options = tf.data.Options()
        options.experimental_distribute.auto_shard_policy = \
            tf.data.experimental.AutoShardPolicy.DATA
        ds_train = ds_train.with_options(options)
        multi_worker_model = build_and_compile_cnn_model()

    checkpoint_prefix = os.path.join(args.checkpoint_dir, "ckpt_{epoch}")

    class PrintLR(tf.keras.callbacks.Callback):
        def on_epoch_end(self, epoch, logs=None):
            print(f"\nLearning rate for epoch {epoch + 1} is "
                  f"{multi_worker_model.optimizer.lr.numpy()}", flush=True)

    callbacks = [
        tf.keras.callbacks.ModelCheckpoint(filepath=checkpoint_prefix, save_weights_only=True),
        tf.keras.callbacks.LearningRateScheduler(decay),
        PrintLR(),
    ]
    multi_worker_model.fit(ds_train, epochs=int(os.environ.get("EPOCHS", "2")),
                           steps_per_epoch=int(os.environ.get("STEPS", "5")),
                           callbacks=callbacks)

    # every worker saves; only worker 0's path is the real one
    if TASK_INDEX == 0:
        model_path = args.saved_model_dir
    else:
        model_path = args.saved_model_dir + "/worker_tmp_" + str(TASK_INDEX)
    multi_worker_model.save(model_path)
    print(f"saved the model into {model_path}", flush=True)


if __name__ == "__main__":
    tf_config = json.loads(os.environ.get("TF_CONFIG") or "{}")
    TASK_INDEX = tf_config["task"]["index"]
    parser = argparse.ArgumentParser()
    parser.add_argument("--saved_model_dir", type=str, required=True,
                        help="Tensorflow export directory.")
    parser.add_argument("--checkpoint_dir", type=str, required=True,
                        help="Tensorflow checkpoint directory.")
    main(parser.parse_args())
