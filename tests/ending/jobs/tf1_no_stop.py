"""A TF1 between-graph loop as users write it (TensorFlow 2.15, tf.compat.v1): a server per
task, ``replica_device_setter``, ``MonitoredTrainingSession`` with its defaults (the chief
saves every 600 s), ``while not sess.should_stop()`` and no ``StopAtStepHook``: it never
stops by itself. It logs ``step = N`` every LOG_STEPS steps, as LoggingTensorHook does."""

import json
import os

import numpy as np
import tensorflow as tf

v1 = tf.compat.v1
v1.disable_eager_execution()
config = json.loads(os.environ["TF_CONFIG"])
job, index = config["task"]["type"], config["task"]["index"]
cluster = tf.train.ClusterSpec(config["cluster"])
server = v1.train.Server(cluster, job_name=job, task_index=index)
if job == "ps":
    server.join()

LOG_STEPS = int(os.environ.get("LOG_STEPS", "50"))
x = np.random.default_rng(0).normal(size=(1024, 4)).astype("float32")
y = (x.sum(axis=1, keepdims=True) > 0).astype("float32")
with v1.device(v1.train.replica_device_setter(cluster=cluster,
                                             worker_device=f"/job:{job}/task:{index}")):
    step = v1.train.get_or_create_global_step()
    w = v1.get_variable("w", [4, 1])
    batch = v1.data.make_one_shot_iterator(
        tf.data.Dataset.from_tensor_slices((x, y)).repeat().batch(32)).get_next()
    loss = v1.losses.sigmoid_cross_entropy(batch[1], tf.matmul(batch[0], w))
    train = v1.train.GradientDescentOptimizer(0.1).minimize(loss, global_step=step)

with v1.train.MonitoredTrainingSession(master=server.target, is_chief=job == "chief",
                                       checkpoint_dir=os.environ["TFCLUSTER_MODEL_DIR"]) as sess:
    while not sess.should_stop():
        _, now = sess.run([train, step])
        if now % LOG_STEPS == 0:
            print(f"step = {now}", flush=True)
