"""The TF2 examples' model: logistic regression on ``ctr_data.to_vector`` inputs.

Plain ``tf.Variable``s and a hand-written SGD step, so it runs the same under
ParameterServerStrategy (variables on the ps) and MultiWorkerMirroredStrategy (mirrored,
updates averaged over the replicas), with no Keras: Keras 3's ``model.fit`` refuses both.
Build it inside ``strategy.scope()``.
"""

from __future__ import annotations

from typing import Any

import ctr_data


class CtrModel:
    """Weights, bias and the global step; ``train_step`` does one SGD step on one batch."""

    def __init__(self, learning_rate: float = 0.5, mirrored: bool = False):
        import tensorflow as tf

        # Under MWMS an update in replica context needs an aggregation: SUM adds the replicas'
        # updates (each replica's loss is already divided by the global batch size), so it is
        # synchronous SGD on the global batch; the step counts once per global step.
        total = tf.VariableAggregation.SUM if mirrored else tf.VariableAggregation.NONE
        first = tf.VariableAggregation.ONLY_FIRST_REPLICA if mirrored else total
        self.weights = tf.Variable(tf.zeros([ctr_data.INPUT_WIDTH, 1]), name="weights",
                                   aggregation=total)
        self.bias = tf.Variable(tf.zeros([1]), name="bias", aggregation=total)
        self.step = tf.Variable(0, dtype=tf.int64, trainable=False, name="global_step",
                                aggregation=first)
        self.learning_rate = learning_rate

    def checkpoint(self) -> Any:
        import tensorflow as tf

        return tf.train.Checkpoint(weights=self.weights, bias=self.bias, step=self.step)

    def logits(self, features) -> Any:
        import tensorflow as tf

        return tf.squeeze(tf.matmul(ctr_data.to_vector(features), self.weights), -1) + self.bias

    def train_step(self, features, labels, global_batch_size: int | None = None) -> Any:
        """One step; loss averaged over ``global_batch_size`` when given (MWMS, so an empty
        last batch on one replica adds nothing), else over the batch."""
        import tensorflow as tf

        with tf.GradientTape() as tape:
            per_example = tf.nn.sigmoid_cross_entropy_with_logits(
                labels=tf.cast(labels, tf.float32), logits=self.logits(features))
            if global_batch_size:
                loss = tf.nn.compute_average_loss(per_example,
                                                  global_batch_size=global_batch_size)
            else:
                loss = tf.reduce_mean(per_example)
        grads = tape.gradient(loss, [self.weights, self.bias])
        for var, grad in zip([self.weights, self.bias], grads):
            var.assign_sub(self.learning_rate * grad)
        self.step.assign_add(1)
        return loss
