"""A small TF2 job for the evaluation tests (TF 2.21), one script for every task.

    python tf2_job.py                   # via `launch`: the chief trains, the evaluator evaluates
    python tf2_job.py check MODEL_DIR WORK_DIR  # one JSON document:
        verify: metrics of each checkpoint in MODEL_DIR recomputed with numpy
        keras:  a Keras model through evaluate_keras_checkpoints, in WORK_DIR/keras
        (and TF2 summaries, tensor scalars, written to WORK_DIR/events)

The chief trains logistic regression with plain variables and saves ``ckpt-N`` through a
CheckpointManager (N a save counter, the step inside); the evaluator restores each new
checkpoint into its own variables and computes AUC / accuracy / log loss afresh.
"""

from __future__ import annotations

import json
import os
import sys
import time

import numpy as np

WIDTH = 4


def make_data(n: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    x = rng.normal(size=(n, WIDTH)).astype(np.float32)
    logits = x @ np.array([1.5, -2.0, 0.7, 0.0], dtype=np.float32) + 0.3
    y = (rng.random(n) < 1 / (1 + np.exp(-logits))).astype(np.int64)
    return x, y


class Model:
    def __init__(self):
        import tensorflow as tf

        self.w = tf.Variable(tf.zeros([WIDTH, 1]), name="w")
        self.b = tf.Variable(tf.zeros([1]), name="b")
        self.step = tf.Variable(0, dtype=tf.int64, name="step")
        self.ckpt = tf.train.Checkpoint(w=self.w, b=self.b, step=self.step)

    def probability(self, x):
        import tensorflow as tf

        return tf.sigmoid(tf.squeeze(tf.matmul(x, self.w), -1) + self.b)


def eval_dataset():
    import tensorflow as tf

    return tf.data.Dataset.from_tensor_slices(make_data(400, 2)).batch(64)


def train(model_dir: str, max_steps: int) -> None:
    import tensorflow as tf

    model = Model()
    manager = tf.train.CheckpointManager(model.ckpt, model_dir, max_to_keep=3)
    x, y = make_data(2000, 1)
    ds = iter(tf.data.Dataset.from_tensor_slices((x, y)).shuffle(2000, seed=1).repeat()
              .batch(32))
    evaluated(model_dir, manager.save())
    while int(model.step.numpy()) < max_steps:
        features, labels = next(ds)
        with tf.GradientTape() as tape:
            loss = tf.reduce_mean(tf.nn.sigmoid_cross_entropy_with_logits(
                labels=tf.cast(labels, tf.float32),
                logits=tf.squeeze(tf.matmul(features, model.w), -1) + model.b))
        for var, grad in zip([model.w, model.b], tape.gradient(loss, [model.w, model.b])):
            var.assign_sub(0.1 * grad)
        model.step.assign_add(1)
        if int(model.step.numpy()) % 20 == 0:
            evaluated(model_dir, manager.save())
    manager.save()


def evaluated(model_dir: str, path: str, bound: float = 180.0) -> None:
    """Hold the chief after a save until the evaluator recorded that checkpoint in the
    metrics file (at most ``bound`` s): every checkpoint is evaluated, whatever the
    machine's load, not those the evaluator happens to catch."""
    from orchestrator.metrics_file import read_metrics

    name = os.path.basename(path)
    deadline = time.monotonic() + bound
    while time.monotonic() < deadline and not any(
            os.path.basename(r.checkpoint) == name for r in read_metrics(model_dir)):
        time.sleep(0.2)


def evaluate(model_dir: str) -> None:
    from orchestrator.evaluation import binary_classifier_metrics, evaluate_tf2_checkpoints

    model = Model()
    outcome = evaluate_tf2_checkpoints(
        model.ckpt, lambda split: binary_classifier_metrics(model.probability, eval_dataset()),
        model_dir=model_dir, poll_secs=0.2, idle_timeout=120)
    print(f"evaluator done: {outcome.reason}, {len(outcome.records)} lines", flush=True)


def verify(model_dir: str) -> list[dict]:
    """Restore each surviving checkpoint and compute the metrics with numpy."""
    import tensorflow as tf

    from orchestrator.metrics_file import read_metrics

    x, y = make_data(400, 2)
    out = []
    for record in read_metrics(model_dir):
        if not tf.io.gfile.exists(record.checkpoint + ".index"):
            continue
        reader = tf.train.load_checkpoint(record.checkpoint)
        w = reader.get_tensor("w/.ATTRIBUTES/VARIABLE_VALUE")
        b = reader.get_tensor("b/.ATTRIBUTES/VARIABLE_VALUE")
        p = 1 / (1 + np.exp(-((x @ w)[:, 0] + b[0])))
        pos, neg = p[y == 1], p[y == 0]
        wins = (pos[:, None] > neg[None, :]).sum() + 0.5 * (pos[:, None] == neg[None, :]).sum()
        pc = np.clip(p, 1e-7, 1 - 1e-7)
        out.append({"checkpoint": record.checkpoint,
                    "step": int(reader.get_tensor("step/.ATTRIBUTES/VARIABLE_VALUE")),
                    "metrics": {"auc": float(wins / (len(pos) * len(neg))),
                                "accuracy": float(((p > 0.5) == y).mean()),
                                "log_loss": float(-np.mean(y * np.log(pc)
                                                           + (1 - y) * np.log(1 - pc)))}})
    return out


def keras(model_dir: str) -> dict:
    """Two checkpoints of a Keras model; the sidecar evaluates the newest, with fresh
    metrics, and its line equals model.evaluate of the same weights."""
    import tensorflow as tf

    from orchestrator.evaluation import evaluate_keras_checkpoints

    def build():
        m = tf.keras.Sequential([tf.keras.Input((WIDTH,)), tf.keras.layers.Dense(1, "sigmoid")])
        m.compile(optimizer="sgd", loss="binary_crossentropy", metrics=["accuracy"])
        return m

    x, y = make_data(2000, 1)
    trainer = build()
    step = tf.Variable(0, dtype=tf.int64)
    manager = tf.train.CheckpointManager(tf.train.Checkpoint(model=trainer, step=step),
                                         model_dir, max_to_keep=5)
    for _ in range(2):
        trainer.fit(x, y, epochs=1, batch_size=100, verbose=0)
        step.assign_add(20)
        manager.save()
    expected = trainer.evaluate(eval_dataset(), return_dict=True, verbose=0)
    evaluator = build()
    evaluator.evaluate(eval_dataset(), verbose=0)   # stale state that must not leak in
    outcome = evaluate_keras_checkpoints(evaluator, eval_dataset, model_dir=model_dir,
                                         max_steps=40, idle_timeout=30)
    return {"reason": outcome.reason, "expected": expected,
            "lines": [{"step": r.step, "metrics": r.metrics} for r in outcome.records]}


def write_summaries(directory: str) -> None:
    """What tf.summary.scalar writes (tensor scalars), without needing TensorBoard: loss
    1/(step+1) and an int64 counter for steps 0..4, and a string that is no scalar."""
    import tensorflow as tf

    writer = tf.summary.create_file_writer(directory)
    with writer.as_default():
        for step in range(5):
            tf.summary.write("loss", 1.0 / (step + 1), step=step)
            tf.summary.write("steps", tf.constant(step, tf.int64), step=step)
            tf.summary.write("note", "not a number", step=step)
    writer.close()


def main() -> None:
    if len(sys.argv) > 3 and sys.argv[1] == "check":
        work = sys.argv[3]
        write_summaries(os.path.join(work, "events"))
        print(json.dumps({"verify": verify(sys.argv[2]),
                          "keras": keras(os.path.join(work, "keras"))}))
        return
    model_dir = os.environ["TFCLUSTER_MODEL_DIR"]
    task = json.loads(os.environ["TF_CONFIG"])["task"]["type"]
    if task == "evaluator":
        evaluate(model_dir)
    else:
        train(model_dir, int(os.environ["TFCLUSTER_MAX_STEPS"]))


if __name__ == "__main__":
    main()
