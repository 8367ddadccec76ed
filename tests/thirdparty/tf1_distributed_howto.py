"""TensorFlow 1's "Distributed TensorFlow" how-to trainer (tensorflow/docs, the r1
deploy/distributed guide, Apache-2.0), as users still run it on TensorFlow 2.15 through
``tf.compat.v1``: between-graph replication, ``replica_device_setter``, a
``StopAtStepHook`` and ``MonitoredTrainingSession`` with its defaults (a checkpoint every
600 s, a summary every 100 steps, ``global_step/sec`` logged every 100 steps).

Changed, and only these: the cluster comes from ``TF_CONFIG`` (the launcher's, chief
included) instead of the ``--ps_hosts/--worker_hosts`` flags; the model is the how-to's
"Build model..." placeholder filled with a small softmax regression on random data; the
checkpoint directory and the last step are flags (the how-to hard-codes /tmp/train_logs
and 1000000).
"""

import argparse
import json
import os

import numpy as np
import tensorflow as tf

tf1 = tf.compat.v1
tf1.disable_eager_execution()


def main(args):
    config = json.loads(os.environ["TF_CONFIG"])
    cluster = tf1.train.ClusterSpec(config["cluster"])
    job_name, task_index = config["task"]["type"], config["task"]["index"]
    server = tf1.train.Server(cluster, job_name=job_name, task_index=task_index)

    if job_name == "ps":
        server.join()
        return
    # Assigns ops to the local worker by default.
    with tf1.device(tf1.train.replica_device_setter(
            worker_device=f"/job:{job_name}/task:{task_index}", cluster=cluster)):
        # Build model...
        rng = np.random.default_rng(task_index)
        images = tf1.constant(rng.random((1024, 64), dtype=np.float32))
        labels = tf1.constant(rng.integers(0, 10, 1024))
        batch = tf1.random.uniform([32], 0, 1024, dtype=tf.int64)
        weights = tf1.get_variable("w", [64, 10])
        logits = tf1.matmul(tf1.gather(images, batch), weights)
        loss = tf1.losses.sparse_softmax_cross_entropy(tf1.gather(labels, batch), logits)
        global_step = tf1.train.get_or_create_global_step()
        train_op = tf1.train.AdagradOptimizer(0.01).minimize(loss, global_step=global_step)

    # The StopAtStepHook handles stopping after running given steps.
    hooks = [tf1.train.StopAtStepHook(last_step=args.last_step)]

    # The MonitoredTrainingSession takes care of session initialization,
    # restoring from a checkpoint, saving to a checkpoint, and closing when done
    # or an error occurs.
    with tf1.train.MonitoredTrainingSession(master=server.target,
                                            is_chief=(job_name == "chief"),
                                            checkpoint_dir=args.checkpoint_dir,
                                            hooks=hooks) as mon_sess:
        while not mon_sess.should_stop():
            # Run a training step asynchronously.
            mon_sess.run(train_op)


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--checkpoint_dir", default="/tmp/train_logs")
    parser.add_argument("--last_step", type=int, default=1000000)
    main(parser.parse_args())
