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
manager = tf.train.CheckpointManager(checkpoint, MODEL_DIR, max_to_keep=3)
handler = tf.distribute.experimental.PreemptionCheckpointHandler(resolver, manager)
if manager.latest_checkpoint:
    checkpoint.restore(manager.latest_checkpoint)


@tf.function
def train_step(batch):
    def one(features, labels):
        with tf.GradientTape() as tape:
            loss = tf.reduce_mean(tf.nn.sigmoid_cross_entropy_with_logits(
                labels[:, None], tf.matmul(features, w)))
        w.assign_sub(0.1 * tape.gradient(loss, w))
        step.assign_add(1)
        return loss
    return strategy.run(one, args=batch)


iterator = iter(dataset)
while True:
    handler.run(train_step, next(iterator))
    done = int(step.numpy())
    if done % 20 == 0:
        print(f"step = {done}", flush=True)
