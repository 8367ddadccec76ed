"""A stock ``tf.estimator.train_and_evaluate`` script, written the way the TensorFlow
Estimator tutorials write one (TF 2.15); test data for tests/ending.

Provenance: the shape of TensorFlow's "Linear model with Estimators" / premade-Estimator
tutorials (tensorflow/docs, site/en/tutorials/estimator/linear.ipynb and premade.ipynb,
Apache-2.0): a LinearClassifier on the Titanic table (891 rows), batch 128, input repeated
for ever, max_steps from the command line, train_and_evaluate on every task. Written for
this project, not copied.

Kept as users leave it: ``keep_checkpoint_max`` default (5), the default worker start
delay (worker i sleeps 5*(i+1) s), TensorFlow's own evaluator, model_dir from the command
line. Changed for the test budget, and only these:
- data: a synthetic table of 891 Titanic-like rows (no download in CI);
- ``save_checkpoints_steps=20`` (the tutorials' users set it; the issue's reproduction);
- ``EvalSpec(start_delay_secs=EVAL_DELAY, throttle_secs=EVAL_THROTTLE)``: TensorFlow's
  defaults are 120 s and 600 s; five repeated CI runs cannot wait 120 s each. Both come
  from the environment (default 1 s) so the benchmark can run the defaults.
"""

import argparse
import os

import numpy as np
import tensorflow as tf

ROWS = 891


def titanic(seed: int):
    rng = np.random.default_rng(seed)
    sex = rng.integers(0, 2, ROWS).astype(np.float32)
    age = rng.normal(30, 12, ROWS).clip(1, 80).astype(np.float32)
    fare = rng.gamma(2.0, 16.0, ROWS).astype(np.float32)
    pclass = rng.integers(1, 4, ROWS).astype(np.float32)
    logit = 2.2 * sex - 0.03 * age + 0.01 * fare - 0.8 * (pclass - 2) - 0.4
    survived = (rng.random(ROWS) < 1 / (1 + np.exp(-logit))).astype(np.int64)
    return {"sex": sex, "age": age, "fare": fare, "class": pclass}, survived


def make_input_fn(data, labels, num_epochs=None, shuffle=True, batch_size=128):
    def input_fn():
        ds = tf.data.Dataset.from_tensor_slices((dict(data), labels))
        if shuffle:
            ds = ds.shuffle(1000)
        return ds.batch(batch_size).repeat(num_epochs)
    return input_fn


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--model_dir", required=True)
    parser.add_argument("--max_steps", type=int, default=1000)
    args = parser.parse_args()

    train, train_y = titanic(0)
    evaluation, eval_y = titanic(1)
    columns = [tf.feature_column.numeric_column(k) for k in ("sex", "age", "fare", "class")]
    config = tf.estimator.RunConfig(save_checkpoints_steps=20)
    est = tf.estimator.LinearClassifier(columns, model_dir=args.model_dir, config=config)
    tf.estimator.train_and_evaluate(
        est,
        tf.estimator.TrainSpec(make_input_fn(train, train_y), max_steps=args.max_steps),
        tf.estimator.EvalSpec(make_input_fn(evaluation, eval_y, num_epochs=1, shuffle=False),
                              start_delay_secs=float(os.environ.get("EVAL_DELAY", "1")),
                              throttle_secs=float(os.environ.get("EVAL_THROTTLE", "1"))))


if __name__ == "__main__":
    main()
