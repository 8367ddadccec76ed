"""The TF1 multi-worker Estimator code of TensorFlow's migration guide, as a script.

Provenance: tensorflow/docs, site/en/guide/migrate/multi_worker_cpu_gpu_training.ipynb
(commit 099e5a1c17e7c1c45fa82b27102502dc10054003), section "TF1: Using
tf.estimator.train_and_evaluate"; Apache-2.0, Copyright 2021 The TensorFlow Authors.
Rewritten here from the guide's cell, not copied: the same calls with the same arguments.

What makes it a test: it leaves model_dir to TensorFlow (``Estimator(model_fn)`` with no
model_dir and no RunConfig), its TrainSpec has no max_steps, its input is finite (batch 1,
no repeat), and EvalSpec keeps TensorFlow's defaults. The guide deletes TF_CONFIG to run in
a notebook; a launched task keeps the launcher's.

Changes: the data are three small made-up rows of the guide's shape (two features, one
label), not the guide's own numbers; nothing else.
"""

import tensorflow as tf
import tensorflow.compat.v1 as tf1

features = [[0.5, 1.0], [1.5, 2.0], [2.5, 3.0]]
labels = [[0.2], [0.4], [0.6]]
eval_features = [[3.5, 4.0], [4.5, 5.0], [5.5, 6.0]]
eval_labels = [[0.7], [0.8], [0.9]]


def _input_fn():
    return tf1.data.Dataset.from_tensor_slices((features, labels)).batch(1)


def _eval_input_fn():
    return tf1.data.Dataset.from_tensor_slices((eval_features, eval_labels)).batch(1)


def _model_fn(features, labels, mode):
    logits = tf1.layers.Dense(1)(features)
    loss = tf1.losses.mean_squared_error(labels=labels, predictions=logits)
    optimizer = tf1.train.AdagradOptimizer(0.05)
    train_op = optimizer.minimize(loss, global_step=tf1.train.get_global_step())
    return tf1.estimator.EstimatorSpec(mode, loss=loss, train_op=train_op)


if __name__ == "__main__":
    assert tf.__version__
    estimator = tf1.estimator.Estimator(model_fn=_model_fn)
    train_spec = tf1.estimator.TrainSpec(input_fn=_input_fn)
    eval_spec = tf1.estimator.EvalSpec(input_fn=_eval_input_fn)
    tf1.estimator.train_and_evaluate(estimator, train_spec, eval_spec)
