"""A Keras MultiWorkerMirroredStrategy job (tf_keras, TensorFlow 2.21) with TensorFlow's own
preemption and restart route: ``BackupAndRestore`` (a backup at each epoch's end). A tiny
model; what it does is set in its environment:

- STEPS_PER_EPOCH (100), EPOCHS (default: enough epochs for TFCLUSTER_MAX_STEPS);
- PACE_SECS (0.02): a sleep per step; LOG_STEPS (10): ``step = N`` every that many steps;
- KILL_AFTER_EPOCH: on its first start worker:1 SIGKILLs itself once that epoch's backup is
  written (tests/faults/test_keras_backup_restart.py).

Each task prints ``epoch N begins (restart R)``, ``backup saved: step N`` after each backup
and ``training done`` at the end (bench/preemption.py reads the steps)."""

import os
import signal
import time

os.environ.setdefault("TF_USE_LEGACY_KERAS", "1")
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import tensorflow as tf  # noqa: E402
import tf_keras as keras  # noqa: E402

STEPS_PER_EPOCH = int(os.environ.get("STEPS_PER_EPOCH", "100"))
PACE = float(os.environ.get("PACE_SECS", "0.02"))
LOG_STEPS = int(os.environ.get("LOG_STEPS", "10"))
EPOCHS = int(os.environ.get("EPOCHS") or
             -(-int(os.environ["TFCLUSTER_MAX_STEPS"]) // STEPS_PER_EPOCH))
KILL_AFTER = os.environ.get("KILL_AFTER_EPOCH")
attempt = int(os.environ.get("TFCLUSTER_RESTART_COUNT", "0"))
victim = KILL_AFTER is not None and attempt == 0 and \
    os.environ.get("TFCLUSTER_TASK_TYPE") == "worker" and \
    os.environ.get("TFCLUSTER_TASK_INDEX") == "1"

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
    def on_epoch_begin(self, epoch, logs=None):
        print(f"epoch {epoch} begins (restart {attempt})", flush=True)

    def on_train_batch_end(self, batch, logs=None):
        step = int(self.model.optimizer.iterations.numpy())
        if step % LOG_STEPS == 0:
            print(f"step = {step}", flush=True)
        if PACE:
            time.sleep(PACE)

    def on_epoch_end(self, epoch, logs=None):     # after BackupAndRestore's own
        print(f"backup saved: step {int(self.model.optimizer.iterations.numpy())}",
              flush=True)
        if victim and epoch == int(KILL_AFTER):
            os.kill(os.getpid(), signal.SIGKILL)


backup = keras.callbacks.BackupAndRestore(os.path.join(os.environ["TFCLUSTER_MODEL_DIR"],
                                                       "backup"))
model.fit(dataset, epochs=EPOCHS, steps_per_epoch=STEPS_PER_EPOCH, callbacks=[backup, Report()],
          verbose=0)
print("training done", flush=True)
