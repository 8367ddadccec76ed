"""The TF docs' multi-worker Keras tutorial as a new user writes it on TensorFlow >= 2.16:
``tf.keras`` (Keras 3 by default, tf-keras 2 when ``TF_USE_LEGACY_KERAS=1``), a
MultiWorkerMirroredStrategy, ``BackupAndRestore`` and ``ModelCheckpoint``. A tiny model;
``TFCLUSTER_MAX_STEPS`` steps in all (epochs of STEPS), random data (no download in CI).

Under Keras 3 ``fit`` fails at once ("Attempt to convert a value (PerReplica:{...}) ... to
a Tensor"); under tf-keras it trains, saves a checkpoint each epoch and exits 0."""

import json
import os

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402

STEPS = 5                      # steps per epoch
max_steps = int(os.environ.get("TFCLUSTER_MAX_STEPS", "10"))
model_dir = os.environ["TFCLUSTER_MODEL_DIR"]
tf_config = json.loads(os.environ["TF_CONFIG"])
workers = len(tf_config["cluster"].get("chief", [])) + len(tf_config["cluster"]["worker"])

strategy = tf.distribute.MultiWorkerMirroredStrategy()
rng = np.random.default_rng(0)
x = rng.random((512, 8), dtype=np.float32)
y = (x.sum(axis=1) > 4).astype(np.int64)
options = tf.data.Options()
options.experimental_distribute.auto_shard_policy = tf.data.experimental.AutoShardPolicy.DATA
dataset = tf.data.Dataset.from_tensor_slices((x, y)).repeat().batch(16 * workers) \
    .with_options(options)

with strategy.scope():
    model = tf.keras.Sequential([
        tf.keras.layers.Input((8,)),
        tf.keras.layers.Dense(16, activation="relu"),
        tf.keras.layers.Dense(2),
    ])
    model.compile(optimizer=tf.keras.optimizers.SGD(0.01),
                  loss=tf.keras.losses.SparseCategoricalCrossentropy(from_logits=True),
                  metrics=["accuracy"])

# Keras' own callbacks: under MultiWorkerMirroredStrategy tf-keras' ModelCheckpoint lets
# the chief alone write into model_dir (the others write into a temporary copy it deletes)
callbacks = [
    tf.keras.callbacks.BackupAndRestore(os.path.join(model_dir, "backup")),
    tf.keras.callbacks.ModelCheckpoint(os.path.join(model_dir, "ckpt_{epoch}")
                                       if os.environ.get("TF_USE_LEGACY_KERAS") == "1"
                                       else os.path.join(model_dir, "ckpt-{epoch}.weights.h5"),
                                       save_weights_only=True),
]
model.fit(dataset, epochs=max(1, max_steps // STEPS), steps_per_epoch=STEPS,
          callbacks=callbacks, verbose=2)
print("training done", flush=True)
