"""A Keras MultiWorkerMirroredStrategy job (tf_keras, TensorFlow 2.21) with TensorFlow's own
preemption route: ``BackupAndRestore`` (a backup at each epoch's end, 100 steps). It prints
``step = N`` every LOG_STEPS steps and ``backup saved: step N`` after each backup, and
sleeps PACE_SECS per step (bench/preemption.py)."""

import os
import time

os.environ.setdefault("TF_USE_LEGACY_KERAS", "1")
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import tensorflow as tf  # noqa: E402
import tf_keras as keras  # noqa: E402

STEPS_PER_EPOCH = 100
PACE = float(os.environ.get("PACE_SECS", "0.02"))
LOG_STEPS = int(os.environ.get("LOG_STEPS", "10"))
EPOCHS = -(-int(os.environ["TFCLUSTER_MAX_STEPS"]) // STEPS_PER_EPOCH)

strategy = tf.distribute.MultiWorkerMirroredStrategy()
features = tf.random.stateless_normal((256, 4), seed=(1, 2))
dataset = tf.data.Dataset.from_tensor_slices((features, tf.reduce_sum(features, 1)))
options = tf.data.Options()
options.experimental_distribute.auto_shard_policy = tf.data.experimental.AutoShardPolicy.DATA
dataset = dataset.repeat().batch(16).with_options(options)
with strategy.scope():
    model = keras.Sequential([keras.Input((4,)), keras.layers.Dense(1)])
    model.compile(optimizer="sgd", loss="mse")


class Report(keras.callbacks.Callback):
    def on_train_batch_end(self, batch, logs=None):
        step = int(self.model.optimizer.iterations.numpy())
        if step % LOG_STEPS == 0:
            print(f"step = {step}", flush=True)
        time.sleep(PACE)

    def on_epoch_end(self, epoch, logs=None):     # after BackupAndRestore's own
        print(f"backup saved: step {int(self.model.optimizer.iterations.numpy())}",
              flush=True)


backup = keras.callbacks.BackupAndRestore(os.path.join(os.environ["TFCLUSTER_MODEL_DIR"],
                                                       "backup"))
model.fit(dataset, epochs=EPOCHS, steps_per_epoch=STEPS_PER_EPOCH, callbacks=[backup, Report()],
          verbose=0)
