"""True metrics per checkpoint, for the evaluator task of a job.

The accuracy a trainer logs is a running mean over past batches: it lags the model (a field
report measured 0.684 shown against 0.721 true). The evaluator here restores every new
complete checkpoint and evaluates it afresh (new metric state each time) on the eval data
and, when asked, on the training data, and appends one line per checkpoint and split to
``<model_dir>/tfcluster_metrics.jsonl`` (orchestrator.metrics_file). It skips a checkpoint
that TensorFlow deletes under it (``keep_checkpoint_max``), and stops once it evaluated a
checkpoint whose stored global_step reaches max_steps, or when no new checkpoint came for
``idle_timeout`` seconds.

In an Estimator script (TF 2.15)::

    from orchestrator.evaluation import evaluate_estimator_checkpoints
    if task_type == "evaluator":
        evaluate_estimator_checkpoints(estimator, eval_input_fn, train_input_fn=train_input_fn,
                                       eval_steps=None, train_steps=50)

In a TF2 script (TF 2.21, a sidecar evaluator): ``evaluate_tf2_checkpoints`` with
``binary_classifier_metrics`` or your own metrics function, or ``evaluate_keras_checkpoints``
for a compiled Keras model.
TensorFlow is imported only inside the functions that need it.
"""

from __future__ import annotations

import os
import sys
import time
from dataclasses import dataclass, field
from typing import Callable

from orchestrator.metrics_file import MetricsRecord, MetricsWriter, clean_metrics

DEFAULT_IDLE_TIMEOUT = 600.0   # seconds without a new checkpoint before the evaluator gives up
DEFAULT_POLL = 1.0

Evaluate = Callable[[str, str], "tuple[int, dict[str, float]]"]


class CheckpointGone(Exception):
    """The checkpoint was deleted before or while it was evaluated."""


@dataclass
class EvalOutcome:
    """Why an evaluation pass ended, what it evaluated and what it skipped."""

    reason: str                                   # "final" or "idle"
    records: list[MetricsRecord] = field(default_factory=list)
    skipped: list[str] = field(default_factory=list)  # checkpoints deleted under us

    @property
    def last_step(self) -> int | None:
        return max((r.step for r in self.records), default=None)


def env_max_steps() -> int | None:
    """TFCLUSTER_MAX_STEPS from the task's environment (the launcher sets it when known)."""
    value = os.environ.get("TFCLUSTER_MAX_STEPS", "").strip()
    return int(value) if value else None


def _log(message: str) -> None:
    print(f"tfcluster-eval: {message}", file=sys.stderr, flush=True)


def follow_checkpoints(
    newest: Callable[[], str | None],
    evaluate: Evaluate,
    writer: MetricsWriter,
    splits: tuple[str, ...] = ("eval",),
    max_steps: int | None = None,
    poll_secs: float = DEFAULT_POLL,
    idle_timeout: float = DEFAULT_IDLE_TIMEOUT,
    log: Callable[[str], None] = _log,
    clock: Callable[[], float] = time.monotonic,
    sleep: Callable[[float], None] = time.sleep,
) -> EvalOutcome:
    """The evaluator loop, without TensorFlow: evaluate each new newest checkpoint.

    ``newest()`` gives the newest complete checkpoint (or None); ``evaluate(path, split)``
    gives ``(stored global_step, metrics)`` or raises CheckpointGone. Checkpoints already in
    the metrics file (an evaluator restarted) are not evaluated again.
    """
    outcome = EvalOutcome(reason="idle")
    done = {r.checkpoint for r in writer.records}
    if max_steps is not None and any(r.step >= max_steps for r in writer.records):
        log("the final checkpoint was already evaluated")
        outcome.reason = "final"
        return outcome
    last_new = clock()
    while True:
        path = newest()
        if path is not None and path not in done:
            done.add(path)
            last_new = clock()
            step = _evaluate_splits(path, evaluate, writer, splits, outcome, log)
            if step is not None and max_steps is not None and step >= max_steps:
                log(f"evaluated the final checkpoint (step {step} >= max_steps {max_steps})")
                outcome.reason = "final"
                return outcome
            continue
        if clock() - last_new >= idle_timeout:
            log(f"no new checkpoint for {idle_timeout:.0f}s; stopping")
            return outcome
        sleep(poll_secs)


def _evaluate_splits(path: str, evaluate: Evaluate, writer: MetricsWriter,
                     splits: tuple[str, ...], outcome: EvalOutcome, log) -> int | None:
    """Evaluate one checkpoint on every split; its step, or None when it vanished."""
    step = None
    for split in splits:
        try:
            step, metrics = evaluate(path, split)
        except CheckpointGone:
            log(f"{path} was deleted before or while it was evaluated ({split}); skipping it")
            outcome.skipped.append(path)
            return None
        record = MetricsRecord(step=int(step), checkpoint=path, split=split, metrics=metrics,
                               time=round(time.time(), 3))
        writer.append(record)
        outcome.records.append(record)
        shown = ", ".join(f"{k} = {v:.4g}" for k, v in sorted(metrics.items()))
        log(f"step {step} {split}: {shown}")
    return step


# ---------------------------------------------------------------- checkpoints
class CheckpointFinder:
    """The newest complete checkpoint of model_dir (orchestrator.checkpoints: follows the
    ``checkpoint`` state file through fsspec), as a path TensorFlow can open, and whether a
    checkpoint's files are still all there."""

    def __init__(self, model_dir: str):
        self.model_dir = model_dir
        self.reader = self._reader(model_dir)

    @staticmethod
    def _reader(folder: str):
        from orchestrator.checkpoints import CheckpointReader

        return CheckpointReader(folder)

    def path(self, name: str) -> str:
        if "://" in self.model_dir:
            return self.model_dir.rstrip("/") + "/" + name
        return os.path.join(self.model_dir, name)

    def newest(self) -> str | None:
        found = self.reader.newest_complete()
        return self.path(found.name) if found else None

    def present(self, path: str) -> bool:
        """Whether the index, the data shards (and .meta) of checkpoint ``path`` exist."""
        folder, _, name = path.replace("\\", "/").rpartition("/")
        reader = self.reader if folder in ("", self.model_dir.rstrip("/")) \
            else self._reader(folder)
        return reader.check(name)[0] is not None

    def gone_or_raise(self, path: str, error: Exception) -> CheckpointGone:
        """A restore failed: CheckpointGone when the files vanished; else the error itself
        (a checkpoint of another model must not be skipped in silence)."""
        if self.present(path):
            raise error
        return CheckpointGone(path)


def evaluate_estimator_checkpoints(
    estimator,
    eval_input_fn: Callable,
    train_input_fn: Callable | None = None,
    *,
    eval_steps: int | None = None,
    train_steps: int | None = None,
    model_dir: str | None = None,
    max_steps: int | None = None,
    exporters: list | tuple = (),
    poll_secs: float = DEFAULT_POLL,
    idle_timeout: float = DEFAULT_IDLE_TIMEOUT,
) -> EvalOutcome:
    """The evaluator task of an Estimator job (TF 2.15).

    Every new checkpoint is evaluated with ``estimator.evaluate(input_fn,
    checkpoint_path=...)``, which builds a new graph and new metric variables each time:
    the values are the model's, not a running mean. ``train_input_fn`` adds a ``train``
    split (use ``train_steps`` to evaluate a sample of it); its TensorBoard summaries go to
    ``model_dir/eval_train``. ``max_steps`` defaults to TFCLUSTER_MAX_STEPS. After the
    final checkpoint, each of ``exporters`` (``tf.estimator.FinalExporter``...) exports it
    to ``model_dir/export/NAME``, as ``train_and_evaluate``'s evaluator would.
    """
    model_dir = model_dir or estimator.model_dir
    max_steps = env_max_steps() if max_steps is None else max_steps
    inputs = {"eval": (eval_input_fn, eval_steps)}
    if train_input_fn is not None:
        inputs["train"] = (train_input_fn, train_steps)
    finder = CheckpointFinder(model_dir)
    outcome = follow_checkpoints(finder.newest, estimator_evaluate_fn(estimator, inputs, finder),
                                 MetricsWriter(model_dir), tuple(inputs), max_steps,
                                 poll_secs, idle_timeout)
    final = [r for r in outcome.records if r.split == "eval"]
    if outcome.reason == "final" and exporters and final:
        for exporter in exporters:
            path = exporter.export(estimator, os.path.join(model_dir, "export", exporter.name),
                                   final[-1].checkpoint, dict(final[-1].metrics),
                                   is_the_final_export=True)
            _log(f"exported {final[-1].checkpoint} to {_text(path)}")
    return outcome


def _text(value) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


def estimator_evaluate_fn(estimator, inputs: dict[str, tuple[Callable, int | None]],
                          finder: CheckpointFinder) -> Evaluate:
    """``evaluate(path, split)`` for an Estimator; ``inputs`` maps a split to (input_fn,
    steps). Summaries of split ``eval`` go to ``model_dir/eval``, others to ``eval_SPLIT``."""
    import tensorflow as tf

    def evaluate(path: str, split: str) -> tuple[int, dict[str, float]]:
        input_fn, steps = inputs[split]
        try:
            results = estimator.evaluate(input_fn, steps=steps, checkpoint_path=path,
                                         name=None if split == "eval" else split)
        except (tf.errors.NotFoundError, ValueError) as e:
            raise finder.gone_or_raise(path, e) from e
        return int(results["global_step"]), clean_metrics(results)

    return evaluate


def checkpoint_step(path: str, step_key: str | None = None) -> int:
    """The training step stored in a checkpoint: ``step_key``, else the usual step and
    optimizer-iteration variables (orchestrator.checkpoints.STEP_KEYS)."""
    from orchestrator.checkpoints import STEP_KEYS, stored_global_step

    if step_key is None:
        step = stored_global_step(path)
    else:
        import tensorflow as tf

        step = int(tf.train.load_checkpoint(path).get_tensor(step_key))
    if step is None:
        raise KeyError(f"no step variable in {path} (looked for {', '.join(STEP_KEYS)}); "
                       "pass step_key=")
    return step


def evaluate_tf2_checkpoints(
    checkpoint,
    metrics_fn: Callable[[str], dict],
    *,
    splits: tuple[str, ...] = ("eval",),
    model_dir: str | None = None,
    step_key: str | None = None,
    max_steps: int | None = None,
    poll_secs: float = DEFAULT_POLL,
    idle_timeout: float = DEFAULT_IDLE_TIMEOUT,
) -> EvalOutcome:
    """A sidecar evaluator for TF2 jobs (ParameterServerStrategy, custom loops; TF 2.21).

    ``checkpoint`` is a ``tf.train.Checkpoint`` over the evaluator's own copy of the model's
    variables, laid out as the trainers save it. For each new checkpoint it is restored
    (``expect_partial``: optimizer slots may be left out) and ``metrics_fn(split)`` computes
    the metrics afresh on those weights (``binary_classifier_metrics`` does so for a binary
    classifier). The step is the one stored in the checkpoint (``step_key``, else the usual
    step / optimizer-iteration variables), not the save counter of ``ckpt-N``.
    """
    import tensorflow as tf

    model_dir = model_dir or os.environ["TFCLUSTER_MODEL_DIR"]
    max_steps = env_max_steps() if max_steps is None else max_steps
    finder = CheckpointFinder(model_dir)

    def evaluate(path: str, split: str) -> tuple[int, dict[str, float]]:
        try:
            step = checkpoint_step(path, step_key)
            checkpoint.restore(path).expect_partial()
        except (tf.errors.NotFoundError, ValueError) as e:
            raise finder.gone_or_raise(path, e) from e
        return step, clean_metrics(metrics_fn(split))

    return follow_checkpoints(finder.newest, evaluate, MetricsWriter(model_dir), splits,
                              max_steps, poll_secs, idle_timeout)


def binary_classifier_metrics(probability_fn: Callable, dataset) -> dict[str, float]:
    """AUC (exact, rank-based), accuracy and log loss of a binary classifier over a dataset
    of ``(features, labels)`` batches: collected from scratch on every call, so no state
    carries over from one checkpoint to the next (orchestrator.binary_metrics)."""
    from orchestrator.binary_metrics import binary_metrics

    labels: list[int] = []
    scores: list[float] = []
    for features, batch_labels in dataset:
        labels += [int(y) for y in batch_labels.numpy().reshape(-1)]
        scores += [float(p) for p in probability_fn(features).numpy().reshape(-1)]
    result = binary_metrics(labels, scores)
    return {"auc": result.auc, "accuracy": result.accuracy, "log_loss": result.log_loss}


def evaluate_keras_checkpoints(
    model,
    eval_dataset_fn: Callable,
    train_dataset_fn: Callable | None = None,
    *,
    model_dir: str | None = None,
    checkpoint=None,
    step_key: str | None = None,
    eval_steps: int | None = None,
    train_steps: int | None = None,
    max_steps: int | None = None,
    poll_secs: float = DEFAULT_POLL,
    idle_timeout: float = DEFAULT_IDLE_TIMEOUT,
) -> EvalOutcome:
    """``evaluate_tf2_checkpoints`` for a compiled Keras model (loss and metrics), like
    Keras' SidecarEvaluator: ``model.evaluate`` resets the metrics before it runs, so each
    line holds the checkpoint's own values. ``checkpoint`` defaults to
    ``tf.train.Checkpoint(model=model)``; the datasets are made afresh for each checkpoint.
    """
    import tensorflow as tf

    inputs = {"eval": (eval_dataset_fn, eval_steps)}
    if train_dataset_fn is not None:
        inputs["train"] = (train_dataset_fn, train_steps)

    def metrics_fn(split: str) -> dict:
        dataset_fn, steps = inputs[split]
        return model.evaluate(dataset_fn(), steps=steps, return_dict=True, verbose=0)

    ckpt = checkpoint if checkpoint is not None else tf.train.Checkpoint(model=model)
    return evaluate_tf2_checkpoints(ckpt, metrics_fn, splits=tuple(inputs), model_dir=model_dir,
                                    step_key=step_key, max_steps=max_steps,
                                    poll_secs=poll_secs, idle_timeout=idle_timeout)
