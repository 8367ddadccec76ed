"""A Keras job as the Keras multi-worker docs write its checkpoints: ``Model.fit`` with
``ModelCheckpoint(os.path.join(model_dir, "ckpt_{epoch}"), save_weights_only=True)``
(tf_keras: TensorFlow's format, a ``checkpoint`` state file naming ``ckpt_N``), its
progress bar on (``verbose=1``: redrawn with \\b and \\r, a newline per epoch). Each batch
takes STEP_SECS (default 0.4 s), so an epoch of 12 batches lasts about 5 s."""

import os
import time

os.environ.setdefault("TF_USE_LEGACY_KERAS", "1")

import numpy as np  # noqa: E402
import tf_keras  # noqa: E402

STEP_SECS = float(os.environ.get("STEP_SECS", "0.4"))
model_dir = os.environ["TFCLUSTER_MODEL_DIR"]
x = np.random.RandomState(0).normal(size=(96, 4)).astype("float32")
y = (x.sum(axis=1) > 0).astype("float32")
model = tf_keras.Sequential([tf_keras.Input(shape=(4,)), tf_keras.layers.Dense(1)])
model.compile(optimizer="sgd", loss=tf_keras.losses.BinaryCrossentropy(from_logits=True))
slow = tf_keras.callbacks.LambdaCallback(on_train_batch_end=lambda *_: time.sleep(STEP_SECS))
model.fit(x, y, batch_size=8, epochs=int(os.environ.get("EPOCHS", "2")), verbose=1,
          callbacks=[slow, tf_keras.callbacks.ModelCheckpoint(
              os.path.join(model_dir, "ckpt_{epoch}"), save_weights_only=True)])
