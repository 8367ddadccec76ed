"""A MultiWorkerMirroredStrategy custom loop (TensorFlow 2.21) as TensorFlow's fault-tolerance
guide writes it: every step through ``PreemptionCheckpointHandler.run``, a
``CheckpointManager`` in model_dir, and neither a stop nor a save of its own (it ignores
max_steps: only a preemption saves it). It logs ``step = N`` every 20 steps. On
SIGTERM to every worker, the handler agrees a step with the peers, saves there and exits
(TensorFlow's exit code 42)."""

import os

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402

MODEL_DIR = os.environ["TFCLUSTER_MODEL_DIR"]

resolver = tf.distribute.cluster_resolver.TFConfigClusterResolver()
strategy = tf.distribute.MultiWorkerMirroredStrategy(cluster_resolver=resolver)
rng = np.random.default_rng(0)
x = rng.normal(size=(1024, 8)).astype("float32")
y = (x @ np.arange(1, 9, dtype="float32") > 0).astype("float32")
dataset = strategy.experimental_distribute_dataset(
    tf.data.Dataset.from_tensor_slices((x, y)).repeat().batch(32))

with strategy.scope():
    w = tf.Variable(tf.zeros([8, 1]), name="w")
    step = tf.Variable(0, dtype=tf.int64, name="step",
                       aggregation=tf.VariableAggregation.ONLY_FIRST_REPLICA)
checkpoint = tf.train.Checkpoint(w=w, step=step)
# every worker saves (a collective); only the chief's copy goes to model_dir, the others' to a
# folder of their own, as TensorFlow's multi-worker guide writes it (one directory for all
# raced: a worker merged the shards the chief was renaming)
writes = resolver.task_type == "chief" or (resolver.task_type == "worker" and resolver.task_id == 0
                                           and "chief" not in resolver.cluster_spec().jobs)
manager = tf.train.CheckpointManager(
    checkpoint, MODEL_DIR if writes else os.path.join(MODEL_DIR, f"workertemp_{resolver.task_id}"),
    max_to_keep=3)
handler = tf.distribute.experimental.PreemptionCheckpointHandler(resolver, manager)
if manager.latest_checkpoint:
    checkpoint.restore(manager.latest_checkpoint)


@tf.function
def train_step(batch):
    def one(features, labels):
        with tf.GradientTape() as tape:
            loss = tf.reduce_mean(tf.nn.sigmoid_cross_entropy_with_logits(
                labels[:, None], tf.matmul(features, w)))
        # the gradient averaged over the workers, as an optimizer does: the workers step
        # together (without it each trained on its own, apart once one was slower)
        grad = tf.distribute.get_replica_context().all_reduce("MEAN", tape.gradient(loss, w))
        w.assign_sub(0.1 * grad)
        step.assign_add(1)
        return loss
    return strategy.run(one, args=batch)


iterator = iter(dataset)
while True:
    handler.run(train_step, next(iterator))
    done = int(step.numpy())
    if done % 20 == 0:
        print(f"step = {done}", flush=True)
