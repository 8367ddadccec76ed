"""A small ParameterServerStrategy job (TensorFlow 2.21) for the fault suite.

Workers and ps serve; the chief coordinates: it schedules paced training rounds, prints
``tfjob-progress step=N`` after each, saves ``ckpt-STEP`` every FAULT_SAVE_STEPS steps and,
when it starts, restores the newest checkpoint in model_dir (so a restarted chief, or a
whole restarted cluster, goes on from there). A lost worker is handled by the
ClusterCoordinator (its closures run elsewhere; it is used again once it is back).
"""

import json
import os
import time

os.environ.setdefault("GRPC_FAIL_FAST", "use_caller")

import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402

MODEL_DIR = os.environ["TFCLUSTER_MODEL_DIR"]
MAX_STEPS = int(os.environ["TFCLUSTER_MAX_STEPS"])
SAVE_STEPS = int(os.environ.get("FAULT_SAVE_STEPS", "100"))
SLEEP = float(os.environ.get("FAULT_STEP_SLEEP", "0.01"))
STEPS_PER_CALL = 5
TASK = json.loads(os.environ["TF_CONFIG"])["task"]


def serve():
    resolver = tf.distribute.cluster_resolver.TFConfigClusterResolver()
    server = tf.distribute.Server(resolver.cluster_spec(), job_name=TASK["type"],
                                  task_index=TASK["index"], protocol="grpc", start=True)
    print("tfjob-serving", flush=True)
    server.join()


def dataset_fn():
    rng = np.random.default_rng(11)
    x = rng.normal(size=(2048, 8)).astype("float32")
    y = (x @ np.arange(1, 9, dtype="float32") > 0).astype("float32")
    return tf.data.Dataset.from_tensor_slices((x, y)).repeat().batch(32)


def coordinate():
    resolver = tf.distribute.cluster_resolver.TFConfigClusterResolver()
    workers = len(resolver.cluster_spec().as_dict().get("worker", []))
    strategy = tf.distribute.ParameterServerStrategy(resolver)
    coordinator = tf.distribute.coordinator.ClusterCoordinator(strategy)
    with strategy.scope():
        w = tf.Variable(tf.zeros([8, 1]), name="w")
        b = tf.Variable(tf.zeros([1]), name="b")
        step = tf.Variable(0, dtype=tf.int64, name="step")
    ckpt = tf.train.Checkpoint(w=w, b=b, step=step)
    manager = tf.train.CheckpointManager(ckpt, MODEL_DIR, max_to_keep=1000)
    if manager.latest_checkpoint:
        ckpt.restore(manager.latest_checkpoint)
        print(f"tfjob-restored {manager.latest_checkpoint} step={int(step.numpy())}", flush=True)
    iterator = iter(coordinator.create_per_worker_dataset(dataset_fn))

    @tf.function
    def train(it):
        for _ in tf.range(STEPS_PER_CALL):
            x, y = next(it)
            with tf.GradientTape() as tape:
                logits = tf.matmul(x, w) + b
                loss = tf.reduce_mean(tf.nn.sigmoid_cross_entropy_with_logits(
                    y[:, None], logits))
            gw, gb = tape.gradient(loss, [w, b])
            w.assign_sub(0.1 * gw)
            b.assign_sub(0.1 * gb)
            step.assign_add(1)
        return loss

    saved = int(step.numpy())
    print(f"tfjob-progress step={saved}", flush=True)
    while int(step.numpy()) < MAX_STEPS:
        for _ in range(2 * workers):
            coordinator.schedule(train, args=(iterator,))
        coordinator.join()
        now = int(step.numpy())
        print(f"tfjob-progress step={now}", flush=True)
        if now - saved >= SAVE_STEPS or now >= MAX_STEPS:
            manager.save(checkpoint_number=now)
            saved = now
        time.sleep(SLEEP * 2 * workers * STEPS_PER_CALL)


if __name__ == "__main__":
    print("tfjob-start", flush=True)
    if TASK["type"] in ("worker", "ps"):
        serve()
    else:
        coordinate()
