"""A ParameterServerStrategy custom loop (TensorFlow 2.21) that saves on a timer (every
SAVE_SECS, 600 by default) and never stops by itself, logging ``step = N`` after each
round. ASK=1 (the default): the loop asks ``orchestrator.preemption.requested()`` and saves
once it is true, the one line of docs/preemption.md; ASK=0: it has no save route."""

import json
import os
import time

os.environ.setdefault("GRPC_FAIL_FAST", "use_caller")

import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402

MODEL_DIR = os.environ["TFCLUSTER_MODEL_DIR"]
SAVE_SECS = float(os.environ.get("SAVE_SECS", "600"))
ASK = os.environ.get("ASK", "1") == "1"
TASK = json.loads(os.environ["TF_CONFIG"])["task"]
STEPS_PER_CALL = 5


def requested() -> bool:
    if not ASK:
        return False
    from orchestrator.preemption import requested as asked
    return asked()


def dataset_fn():
    rng = np.random.default_rng(11)
    x = rng.normal(size=(2048, 8)).astype("float32")
    y = (x @ np.arange(1, 9, dtype="float32") > 0).astype("float32")
    return tf.data.Dataset.from_tensor_slices((x, y)).repeat().batch(32)


def coordinate():
    resolver = tf.distribute.cluster_resolver.TFConfigClusterResolver()
    strategy = tf.distribute.ParameterServerStrategy(resolver)
    coordinator = tf.distribute.coordinator.ClusterCoordinator(strategy)
    with strategy.scope():
        w = tf.Variable(tf.zeros([8, 1]), name="w")
        step = tf.Variable(0, dtype=tf.int64, name="step")
    ckpt = tf.train.Checkpoint(w=w, step=step)
    manager = tf.train.CheckpointManager(ckpt, MODEL_DIR, max_to_keep=3)
    if manager.latest_checkpoint:
        ckpt.restore(manager.latest_checkpoint)
    iterator = iter(coordinator.create_per_worker_dataset(dataset_fn))

    @tf.function
    def train(it):
        for _ in tf.range(STEPS_PER_CALL):
            x, y = next(it)
            with tf.GradientTape() as tape:
                loss = tf.reduce_mean(tf.nn.sigmoid_cross_entropy_with_logits(
                    y[:, None], tf.matmul(x, w)))
            w.assign_sub(0.1 * tape.gradient(loss, w))
            step.assign_add(1)
        return loss

    saved_at = time.monotonic()
    while True:
        for _ in range(4):
            coordinator.schedule(train, args=(iterator,))
        coordinator.join()
        print(f"step = {int(step.numpy())}", flush=True)
        if requested():
            manager.save(checkpoint_number=int(step.numpy()))
            return
        if time.monotonic() - saved_at >= SAVE_SECS:
            manager.save(checkpoint_number=int(step.numpy()))
            saved_at = time.monotonic()


if __name__ == "__main__":
    if TASK["type"] in ("worker", "ps"):
        resolver = tf.distribute.cluster_resolver.TFConfigClusterResolver()
        tf.distribute.Server(resolver.cluster_spec(), job_name=TASK["type"],
                             task_index=TASK["index"], protocol="grpc", start=True).join()
    else:
        coordinate()
