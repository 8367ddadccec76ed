"""A Keras MultiWorkerMirroredStrategy job that survives a lost worker the way TensorFlow
means it to: ``tf.keras.callbacks.BackupAndRestore`` (tf_keras, TensorFlow 2.21). A tiny
model, a few steps. On its first start worker:1 SIGKILLs itself once epoch KILL_AFTER's
backup is written; the launcher restarts the whole cluster and every worker resumes from
that backup. Each task prints ``epoch N begins`` (and its restart count) as it trains."""

import os
import signal

os.environ.setdefault("TF_USE_LEGACY_KERAS", "1")
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import tensorflow as tf  # noqa: E402
import tf_keras as keras  # noqa: E402

EPOCHS, STEPS, KILL_AFTER = 4, 3, 1
attempt = int(os.environ.get("TFCLUSTER_RESTART_COUNT", "0"))
victim = os.environ.get("TFCLUSTER_TASK_TYPE") == "worker" and \
    os.environ.get("TFCLUSTER_TASK_INDEX") == "1" and attempt == 0

strategy = tf.distribute.MultiWorkerMirroredStrategy()
features = tf.random.stateless_normal((256, 4), seed=(1, 2))
dataset = tf.data.Dataset.from_tensor_slices((features, tf.reduce_sum(features, 1)))
options = tf.data.Options()
options.experimental_distribute.auto_shard_policy = tf.data.experimental.AutoShardPolicy.DATA
dataset = dataset.repeat().batch(16).with_options(options)
with strategy.scope():
    model = keras.Sequential([keras.Input((4,)), keras.layers.Dense(1)])
    model.compile(optimizer="sgd", loss="mse")


class Say(keras.callbacks.Callback):
    def on_epoch_begin(self, epoch, logs=None):
        print(f"epoch {epoch} begins (restart {attempt})", flush=True)

    def on_epoch_end(self, epoch, logs=None):
        if victim and epoch == KILL_AFTER:
            os.kill(os.getpid(), signal.SIGKILL)


backup = keras.callbacks.BackupAndRestore(os.path.join(os.environ["TFCLUSTER_MODEL_DIR"],
                                                       "backup"))
model.fit(dataset, epochs=EPOCHS, steps_per_epoch=STEPS, callbacks=[backup, Say()],
          verbose=0)
print("training done", flush=True)
