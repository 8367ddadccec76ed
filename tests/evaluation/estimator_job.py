"""A small Estimator job for the evaluation tests (TF 2.15), one script for every task.

    python estimator_job.py                    # a task of a `launch` job (TF_CONFIG)
    python estimator_job.py check MODEL_DIR WORK_DIR  # after the job, one JSON document:
        verify:  a fresh evaluate of every checkpoint in the metrics file, in a new process
        export:  a SavedModel of the newest checkpoint (WORK_DIR/export) + WORK_DIR/eval.csv
        deleted: evaluator meets checkpoints deleted under it (in a copy of model_dir)
        events:  the training loss as TensorFlow's own summary_iterator reads it

Trainers run train_and_evaluate; the evaluator runs orchestrator.evaluation's helper on
the eval data and a sample of the training data.
"""

from __future__ import annotations

import csv
import json
import os
import sys

import numpy as np

FEATURES = ("x0", "x1", "x2", "x3")
BATCH = 32
TRAIN_EVAL_STEPS = 4


def make_data(n: int, seed: int) -> tuple[dict[str, np.ndarray], np.ndarray]:
    """A noisy linear problem: true accuracy well below 1, so metrics move with training."""
    rng = np.random.default_rng(seed)
    x = rng.normal(size=(n, len(FEATURES))).astype(np.float32)
    logits = x @ np.array([1.5, -2.0, 0.7, 0.0], dtype=np.float32) + 0.3
    y = (rng.random(n) < 1 / (1 + np.exp(-logits))).astype(np.int64)
    return {name: x[:, i] for i, name in enumerate(FEATURES)}, y


def input_fn(split: str, repeat: bool):
    import tensorflow as tf

    def fn():
        features, labels = make_data(2000, 1) if split == "train" else make_data(500, 2)
        ds = tf.data.Dataset.from_tensor_slices((features, labels))
        if split == "train":
            shard = int(os.environ.get("TFCLUSTER_SHARD_INDEX", "0"))
            shards = int(os.environ.get("TFCLUSTER_NUM_SHARDS", "1"))
            ds = ds.shard(shards, shard)
        if repeat:
            ds = ds.shuffle(500, seed=3).repeat()
        return ds.batch(BATCH)

    return fn


def estimator(model_dir: str):
    import tensorflow as tf

    columns = [tf.feature_column.numeric_column(name) for name in FEATURES]
    config = tf.estimator.RunConfig(
        model_dir=model_dir,
        save_checkpoints_steps=int(os.environ.get("JOB_SAVE_STEPS", "40")),
        keep_checkpoint_max=int(os.environ.get("JOB_KEEP", "100")),
        save_summary_steps=10,
        log_step_count_steps=50,
        experimental_max_worker_delay_secs=0,
    )
    return tf.estimator.LinearClassifier(
        columns, config=config, optimizer=lambda: tf.keras.optimizers.legacy.SGD(0.05))


def SlowSteps(seconds: float):
    """A hook that sleeps after each step: more checkpoints for the evaluator to see."""
    import time

    import tensorflow as tf

    class Hook(tf.estimator.SessionRunHook):
        def after_run(self, run_context, run_values):
            time.sleep(seconds)

    return Hook()


def EvaluatedBeforeOn(model_dir: str, bound: float = 180.0):
    """A hook that holds the chief after each new checkpoint until the evaluator recorded
    its evaluation in the metrics file (at most ``bound`` s): the evaluator then evaluates
    every checkpoint, whatever the machine's load, instead of those it happens to catch."""
    import time

    import tensorflow as tf

    from orchestrator.metrics_file import read_metrics

    class Hook(tf.estimator.SessionRunHook):
        seen: str | None = None

        def after_run(self, run_context, run_values):
            newest = tf.train.latest_checkpoint(model_dir)
            if newest is None or newest == self.seen:
                return
            self.seen = newest
            name = os.path.basename(newest)
            deadline = time.monotonic() + bound
            while time.monotonic() < deadline and not any(
                    os.path.basename(r.checkpoint) == name and r.split == "eval"
                    for r in read_metrics(model_dir)):
                time.sleep(0.2)

    return Hook()


def run_task() -> None:
    import tensorflow as tf

    from orchestrator.evaluation import evaluate_estimator_checkpoints

    model_dir = os.environ["TFCLUSTER_MODEL_DIR"]
    est = estimator(model_dir)
    task = json.loads(os.environ["TF_CONFIG"])["task"]["type"]
    if task == "evaluator":
        outcome = evaluate_estimator_checkpoints(
            est, input_fn("eval", repeat=False), input_fn("train", repeat=False),
            train_steps=TRAIN_EVAL_STEPS, poll_secs=0.5, idle_timeout=240)
        print(f"evaluator done: {outcome.reason}, {len(outcome.records)} lines, "
              f"skipped {len(outcome.skipped)}", flush=True)
        return
    max_steps = int(os.environ["TFCLUSTER_MAX_STEPS"])
    hooks = [SlowSteps(float(os.environ.get("JOB_STEP_SLEEP", "0")))]
    if task == "chief" and os.environ.get("JOB_EVALUATE_EACH"):
        hooks.append(EvaluatedBeforeOn(model_dir))
    tf.estimator.train_and_evaluate(
        est, tf.estimator.TrainSpec(input_fn("train", repeat=True), max_steps=max_steps,
                                    hooks=hooks),
        tf.estimator.EvalSpec(input_fn("eval", repeat=False), steps=None))


def verify(model_dir: str) -> list[dict]:
    """Evaluate every checkpoint named in the metrics file afresh, in a new process."""
    import tensorflow as tf

    from orchestrator.metrics_file import read_metrics

    tf.get_logger().setLevel("ERROR")
    est = estimator(model_dir)
    out = []
    for record in read_metrics(model_dir):
        if not tf.io.gfile.exists(record.checkpoint + ".index"):
            continue
        fn, steps = ((input_fn("eval", False), None) if record.split == "eval"
                     else (input_fn("train", False), TRAIN_EVAL_STEPS))
        results = est.evaluate(fn, steps=steps, checkpoint_path=record.checkpoint,
                               name=f"verify_{record.split}")
        out.append({"checkpoint": record.checkpoint, "split": record.split,
                    "step": int(results["global_step"]),
                    "metrics": {k: float(v) for k, v in results.items() if k != "global_step"}})
    return out


def deleted(model_dir: str) -> dict:
    """Delete the data of the oldest checkpoint and the index of the next, then let the
    evaluator loop meet them, then the newest one; and a checkpoint of another model."""
    import glob

    import tensorflow as tf

    from orchestrator.evaluation import (
        CheckpointFinder,
        CheckpointGone,
        estimator_evaluate_fn,
        follow_checkpoints,
    )
    from orchestrator.metrics_file import MetricsWriter

    tf.get_logger().setLevel("ERROR")
    state = tf.train.get_checkpoint_state(model_dir)
    # the state file holds absolute paths: name the files of this (copied) model_dir
    old = [os.path.join(model_dir, os.path.basename(p)) for p in state.all_model_checkpoint_paths]
    finder = CheckpointFinder(model_dir)
    final = finder.newest()
    for name in glob.glob(old[0] + ".data-*"):
        os.remove(name)
    os.remove(old[1] + ".index")
    evaluate = estimator_evaluate_fn(estimator(model_dir),
                                     {"eval": (input_fn("eval", False), None)}, finder)
    sequence = [old[0], old[1], final]
    outcome = follow_checkpoints(lambda: sequence.pop(0) if len(sequence) > 1 else sequence[0],
                                 evaluate, MetricsWriter(model_dir + "/deleted_test"),
                                 max_steps=int(final.rsplit("-", 1)[1]), poll_secs=0.1,
                                 idle_timeout=5)
    other = os.path.join(model_dir, "other", "model.ckpt-1")
    with tf.Graph().as_default(), tf.compat.v1.Session() as sess:
        tf.compat.v1.Variable(1.0, name="unrelated")
        sess.run(tf.compat.v1.global_variables_initializer())
        tf.compat.v1.train.Saver().save(sess, other)
    try:
        evaluate(other, "eval")
        mismatch = "evaluated"
    except CheckpointGone:
        mismatch = "skipped"
    except tf.errors.OpError as e:
        mismatch = type(e).__name__
    return {"old": old[:2], "final": final, "reason": outcome.reason,
            "skipped": outcome.skipped, "steps": [r.step for r in outcome.records],
            "mismatch": mismatch}


def export(model_dir: str, export_base: str, csv_path: str) -> str:
    """Export the newest checkpoint as a SavedModel (tf.Example parsing signature) and
    write the eval data as CSV (header x0..x3,label)."""
    import tensorflow as tf

    est = estimator(model_dir)
    columns = [tf.feature_column.numeric_column(name) for name in FEATURES]
    spec = tf.feature_column.make_parse_example_spec(columns)
    receiver = tf.estimator.export.build_parsing_serving_input_receiver_fn(spec)
    path = est.export_saved_model(export_base, receiver)
    features, labels = make_data(500, 2)
    with open(csv_path, "w", newline="", encoding="utf-8") as f:
        w = csv.writer(f)
        w.writerow([*FEATURES, "label"])
        for i in range(len(labels)):
            w.writerow([*(repr(float(features[n][i])) for n in FEATURES), int(labels[i])])
    return path.decode() if isinstance(path, bytes) else path


def events(model_dir: str) -> list:
    import glob

    import tensorflow as tf

    out = []
    for name in sorted(glob.glob(model_dir + "/events.out.tfevents.*")):
        for e in tf.compat.v1.train.summary_iterator(name):
            out += [(e.step, v.simple_value) for v in e.summary.value if v.tag == "loss"]
    return sorted(out)


def check(model_dir: str, work: str) -> None:
    import shutil

    result = {"verify": verify(model_dir),
              "export": export(model_dir, os.path.join(work, "export"),
                               os.path.join(work, "eval.csv")),
              "events": events(model_dir)}
    shutil.copytree(model_dir, os.path.join(work, "copy"))
    result["deleted"] = deleted(os.path.join(work, "copy"))
    print(json.dumps(result))


if __name__ == "__main__":
    if len(sys.argv) > 1 and sys.argv[1] == "check":
        check(sys.argv[2], sys.argv[3])
    else:
        run_task()
