"""Keras 3 on JAX across processes, as tfcluster's ``"keras": "jax"`` runs it: each process
reads its place from ``KERAS_DISTRIBUTION_*`` (``keras.distribution.initialize()``), trains
``keras.distribution.DataParallel`` over every process's CPU, its own shard of random data,
``TFCLUSTER_MAX_STEPS`` steps in all (epochs of STEPS); or, with the spec's ``epochs``,
``TFCLUSTER_EXAMPLES`` examples made alike everywhere, each process fitting its shard
(``orchestrator.sharding.shard_arrays``) for ``TFCLUSTER_EPOCHS`` epochs of
``TFCLUSTER_BATCH_SIZE``. Process 0 alone writes the
checkpoints (``ckpt-{epoch}.weights.h5``, then ``final.keras``) and the BackupAndRestore
backup into ``$TFCLUSTER_MODEL_DIR`` (every process takes part in a save: it gathers the
weights; two writers of one .h5 collide on its file lock, so the others write apart)."""

import os
import shutil
import signal

os.environ.setdefault("KERAS_BACKEND", "jax")

import jax  # noqa: E402

jax.config.update("jax_cpu_collectives_implementation", "gloo")

import keras  # noqa: E402
import numpy as np  # noqa: E402

STEPS, BATCH = 4, 16
keras.distribution.initialize()
process, processes = jax.process_index(), jax.process_count()
max_steps = int(os.environ.get("TFCLUSTER_MAX_STEPS", "8"))
model_dir = os.environ["TFCLUSTER_MODEL_DIR"]

keras.distribution.set_distribution(keras.distribution.DataParallel(
    devices=keras.distribution.list_devices(), auto_shard_dataset=False))
epochs_given = "TFCLUSTER_EPOCHS" in os.environ
if epochs_given:                                # the whole data set, then this process's shard
    BATCH = int(os.environ["TFCLUSTER_BATCH_SIZE"])
    x = np.random.default_rng(0).random((int(os.environ["TFCLUSTER_EXAMPLES"]), 8),
                                        dtype=np.float32)
else:                                           # this process's own random shard
    x = np.random.default_rng(process).random((STEPS * BATCH, 8), dtype=np.float32)
y = (x.sum(axis=1, keepdims=True) > 4).astype(np.float32)
if epochs_given:      # tfcluster's orchestrator on PYTHONPATH: only for a job in epochs
    from orchestrator.sharding import shard_arrays

    x, y = shard_arrays(x, y)

model = keras.Sequential([keras.Input((8,)), keras.layers.Dense(8, activation="relu"),
                          keras.layers.Dense(1, activation="sigmoid")])
model.compile(optimizer="sgd", loss="binary_crossentropy")


class KillOnce(keras.callbacks.Callback):
    """With KILL_AFTER_EPOCH=N, process 1 of the first attempt SIGKILLs itself once epoch N
    is saved: the launcher restarts the group, which resumes from the backup."""

    def on_epoch_end(self, epoch, logs=None):
        if str(epoch + 1) == os.environ.get("KILL_AFTER_EPOCH") and process == 1 and \
                os.environ.get("TFCLUSTER_RESTART_COUNT") == "0":
            os.kill(os.getpid(), signal.SIGKILL)


# Saving gathers the sharded weights: every process saves, process 0 into model_dir, the
# others into a temporary directory of their own (two writers of one .h5 collide)
where = model_dir if process == 0 else os.path.join(model_dir, f"workertemp_{process}")
print(f"process {process} starts (restart {os.environ.get('TFCLUSTER_RESTART_COUNT')})",
      flush=True)
callbacks = [keras.callbacks.ModelCheckpoint(os.path.join(where, "ckpt-{epoch}.weights.h5"),
                                             save_weights_only=True),
             keras.callbacks.BackupAndRestore(os.path.join(where, "backup"),
                                              delete_checkpoint=False), KillOnce()]
epochs = int(os.environ["TFCLUSTER_EPOCHS"]) if epochs_given else max(1, max_steps // STEPS)
model.fit(x, y, batch_size=BATCH, epochs=epochs, callbacks=callbacks, verbose=2)
model.save(os.path.join(where, "final.keras"))
if process != 0:
    shutil.rmtree(where)
print(f"process {process} of {processes}: training done", flush=True)
