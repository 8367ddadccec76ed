"""A TF1 between-graph job (``tf.compat.v1``, TensorFlow 2.15) whose chief is made to
restore mid-run: at global step ABORT_AT a hook raises ``AbortedError`` once, and
``MonitoredTrainingSession`` recovers as it does from a lost ps or a preempted session —
it restores the newest checkpoint, so its summaries start again from that step in the
same events file. The script ignores max_steps (it trains until it is stopped), saves a
checkpoint every SAVE_EVERY steps and a summary every 5 (flushed at once, so that the
launcher reads them as they come), and trains slower after the restore (0.2 s a step).
A ps, where the cluster has one, serves until stopped."""

import json
import os
import time

import tensorflow as tf

tf1 = tf.compat.v1
tf1.disable_eager_execution()
config = json.loads(os.environ["TF_CONFIG"])
cluster = tf1.train.ClusterSpec(config["cluster"])
kind, index = config["task"]["type"], config["task"]["index"]
server = tf1.train.Server(cluster, job_name=kind, task_index=index)
if kind == "ps":
    server.join()

ABORT_AT = int(os.environ.get("ABORT_AT", "35"))
SAVE_EVERY = int(os.environ.get("SAVE_EVERY", "30"))
with tf1.device(tf1.train.replica_device_setter(cluster=cluster,
                                                worker_device=f"/job:{kind}/task:{index}")):
    global_step = tf1.train.get_or_create_global_step()
    w = tf1.get_variable("w", [], initializer=tf1.zeros_initializer())
    loss = tf1.square(w - 3.0)
    tf1.summary.scalar("loss", loss)
    train = tf1.train.GradientDescentOptimizer(0.01).minimize(loss, global_step=global_step)


MODEL_DIR = os.environ["TFCLUSTER_MODEL_DIR"]


class AbortOnce(tf1.train.SessionRunHook):
    aborted = False

    def before_run(self, run_context):
        return tf1.train.SessionRunArgs(global_step)

    def after_run(self, run_context, run_values):
        if not AbortOnce.aborted and run_values.results >= ABORT_AT:
            AbortOnce.aborted = True
            print(f"aborting the session at step {run_values.results}", flush=True)
            raise tf.errors.AbortedError(None, None, "made to restore")
        tf1.summary.FileWriterCache.get(MODEL_DIR).flush()


with tf1.train.MonitoredTrainingSession(
        master=server.target, is_chief=True, checkpoint_dir=MODEL_DIR,
        save_checkpoint_steps=SAVE_EVERY, save_checkpoint_secs=None,
        save_summaries_steps=5, log_step_count_steps=None, hooks=[AbortOnce()]) as session:
    while not session.should_stop():
        session.run(train)
        time.sleep(0.2 if AbortOnce.aborted else 0.05)
