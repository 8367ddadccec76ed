"""The closing lines: one last read of model_dir after every task ended, and what it says.

The coordinator's last poll can be a second old when the job ends (the final checkpoint
may land after it), so the end of a job is told from a fresh read: the newest complete
checkpoint, the newest step the evaluator evaluated (its eval events or the metrics file),
and the trainers' output (whether any read its shard through orchestrator.sharding). Each
line names a situation a user must know about and what to do:

- max_steps given, no checkpoint ever written into model_dir;
- the newest checkpoint short of max_steps;
- the newest checkpoint many times max_steps (the script ignores max_steps);
- ``epochs`` given, but no trainer read its shard;
- an evaluator ran, but the final checkpoint was not evaluated.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from orchestrator.checkpoints import Checkpoint, CheckpointReader
from orchestrator.evaluated import newest_evaluated
from orchestrator.metrics_file import METRICS_FILE
from orchestrator.sharding import SHARD_MARK

CHECKPOINT_NOTES = ("no checkpoint was written", "no TensorFlow checkpoint",
                    "the newest complete checkpoint is at")
EPOCHS_NOTE = "epochs "     # says what the cluster saw by max_steps: only after training
IGNORED_FACTOR = 2          # newest checkpoint >= this x max_steps: max_steps was ignored
RECIPE = "docs/ending.md"


@dataclass
class Closing:
    """What model_dir holds at the end, and the lines to show."""

    checkpoint: Checkpoint | None = None
    max_steps: int | None = None
    evaluated_step: int | None = None
    has_evaluator: bool = False
    notes: list[str] = field(default_factory=list)
    readable: bool = True       # the last read of model_dir succeeded
    keras_files: list[str] = field(default_factory=list)   # Keras 3 files, no checkpoint

    @property
    def final_step(self) -> int | None:
        return self.checkpoint.step if self.checkpoint else None

    @property
    def steps_past_max(self) -> int | None:
        if self.final_step is None or self.max_steps is None:
            return None
        return self.final_step - self.max_steps

    @property
    def evaluation(self) -> str:
        """``none`` (no evaluator), ``evaluated`` (the final checkpoint, or one at or past
        max_steps), ``not evaluated``."""
        if not self.has_evaluator:
            return "none"
        target = self.target_step
        if target is not None and self.evaluated_step is not None and \
                self.evaluated_step >= target:
            return "evaluated"
        return "not evaluated"

    @property
    def target_step(self) -> int | None:
        """The step whose evaluation ends the evaluator's work: the final checkpoint's, or
        max_steps when training went past it."""
        steps = [s for s in (self.final_step, self.max_steps) if s is not None]
        return min(steps) if steps else None

    def outcome_line(self, how: str | None = None) -> str | None:
        """Where training ended, against max_steps (``how``: what saved the final
        checkpoint, when the launcher asked for it)."""
        ckpt = self.checkpoint
        if ckpt is None:
            return None
        if ckpt.step is None:
            return f"final checkpoint {ckpt.progress}"
        line = f"final checkpoint {ckpt.name}"
        past = self.steps_past_max
        if past is not None:
            line += (f", {past} step{'s' if past != 1 else ''} past max_steps {self.max_steps}"
                     if past >= 0 else f", {-past} short of max_steps {self.max_steps}")
        if how and past is not None and past >= 0:
            line += f" ({how})"
        if self.has_evaluator:
            line += (f"; evaluated at step {self.evaluated_step}"
                     if self.evaluated_step is not None else "; never evaluated")
        return line

    def to_dict(self) -> dict[str, Any]:
        return {"final_checkpoint": self.checkpoint.name if self.checkpoint else None,
                "final_step": self.final_step, "max_steps": self.max_steps,
                "steps_past_max_steps": self.steps_past_max,
                "evaluation": self.evaluation, "evaluated_step": self.evaluated_step,
                "notes": list(self.notes)}


def metrics_eval_step(reader: CheckpointReader) -> int | None:
    """The newest step of an eval line in tfcluster_metrics.jsonl, or None."""
    try:
        text = reader.fs.cat_file(reader._path(METRICS_FILE)).decode("utf-8", "replace")
    except (FileNotFoundError, OSError):
        return None
    steps = []
    for line in text.splitlines():
        try:
            record = json.loads(line)
        except ValueError:
            continue
        if isinstance(record, dict) and record.get("split", "eval") == "eval" and \
                isinstance(record.get("step"), int):
            steps.append(record["step"])
    return max(steps) if steps else None


KERAS_FILES = ("*.weights.h5", "*.keras", "*.h5")


def keras_files(reader: CheckpointReader) -> list[str]:
    """Keras files directly in model_dir (one listing, at the end only)."""
    found: list[str] = []
    for pattern in KERAS_FILES:
        try:
            found += [f.rsplit("/", 1)[-1] for f in reader.fs.glob(reader._path(pattern))]
        except (FileNotFoundError, NotADirectoryError, OSError):
            continue
    return sorted(set(found))


def read_shard_marks(log_paths: Iterable[str]) -> bool:
    """Whether any of these logs says the task read its shard (orchestrator.sharding)."""
    mark = SHARD_MARK.encode()
    for path in log_paths:
        try:
            with open(path, "rb") as f:
                if mark in f.read():
                    return True
        except OSError:
            continue
    return False


def final_read(reader: CheckpointReader, max_steps: int | None, has_evaluator: bool,
               epochs: int | None = None, trainer_logs: Iterable[str] = (),
               model_dir: str | None = None, training_finished: bool = True,
               seen_evaluated: int | None = None) -> Closing:
    """Read model_dir once more and decide the closing lines. When training did not finish
    (a task failed, an interrupt) the failure is the story: no line about where the
    checkpoints stand, nor about what the cluster saw of its input by max_steps.
    ``seen_evaluated``: the newest evaluated step the coordinator saw while the job ran (an
    events file can be overwritten since: two writers of one name)."""
    try:
        ckpt = reader.newest_complete()
        evaluated = newest_evaluated(reader, metrics_eval_step(reader)) if has_evaluator \
            else None
        if has_evaluator and seen_evaluated is not None:
            evaluated = max(evaluated or seen_evaluated, seen_evaluated)
    except OSError as e:
        c = Closing(max_steps=max_steps, has_evaluator=has_evaluator, readable=False)
        c.notes.append(f"model_dir could not be read at the end: {type(e).__name__}: {e}")
        return c
    c = Closing(ckpt, max_steps, evaluated, has_evaluator)
    c.keras_files = keras_files(reader) if ckpt is None and max_steps is not None else []
    notes = closing_notes(c, epochs, read_shard_marks(trainer_logs) if epochs else True,
                          model_dir or reader.model_dir)
    c.notes += notes if training_finished else \
        [n for n in notes if not n.startswith(CHECKPOINT_NOTES + (EPOCHS_NOTE,))]
    return c


def closing_notes(c: Closing, epochs: int | None, shard_read: bool,
                  model_dir: str) -> list[str]:
    """The lines for the situations of the module docstring."""
    notes = [checkpoint_note(c, model_dir)]
    if epochs is not None and not shard_read:
        notes.append(epochs_note(epochs, c.max_steps))
    if c.has_evaluator and c.checkpoint is not None and c.evaluation != "evaluated":
        notes.append(evaluation_note(c))
    return [n for n in notes if n]


def checkpoint_note(c: Closing, model_dir: str) -> str | None:
    """What is wrong with the final checkpoint against max_steps, if anything: none (or
    Keras files only), short of max_steps, or far past it (a script ignoring it)."""
    step, max_steps = c.final_step, c.max_steps
    if max_steps is None:
        return None
    if c.checkpoint is None and c.keras_files:
        return (f"no TensorFlow checkpoint in model_dir {model_dir} (no `checkpoint` "
                f"state file), only Keras files ({', '.join(c.keras_files[:3])}): "
                f"Keras 3 saves .weights.h5/.keras, which tfcluster cannot read for "
                f"steps; save with tf.train.CheckpointManager, or tf_keras' "
                f"ModelCheckpoint('ckpt_{{epoch}}', save_weights_only=True)")
    if c.checkpoint is None:
        return (f"no checkpoint was written into model_dir {model_dir} although "
                f"max_steps {max_steps} was given: does the script save elsewhere "
                f"(its own model_dir instead of TFCLUSTER_MODEL_DIR)?")
    if step is not None and step < max_steps:
        return f"the newest complete checkpoint is at step {step}, short of max_steps {max_steps}"
    if step is not None and step >= IGNORED_FACTOR * max_steps:
        return (f"the newest checkpoint {c.checkpoint.name} is {step / max_steps:.1f}x "
                f"max_steps {max_steps}: the script ignores max_steps. Give it to "
                f"TrainSpec(max_steps=int(os.environ['TFCLUSTER_MAX_STEPS'])), or run "
                f"the script with `python -m orchestrator.at_max_steps` ({RECIPE})")
    return None


def epochs_note(epochs: int, max_steps: int | None) -> str:
    """``epochs`` given, but no trainer read its shard: each read its own full copy."""
    worth = f"{epochs} epochs' worth" if epochs > 1 else "one epoch's worth"
    return (f"epochs {epochs} had no effect on the input: no trainer read its "
            f"shard through orchestrator.sharding or orchestrator.epochs, so each "
            f"read its own full copy of the data; by max_steps {max_steps} the "
            f"cluster read {worth} of examples in all, from those copies: some "
            f"examples several times, others never (docs/sharding.md)")


def evaluation_note(c: Closing) -> str:
    """The final checkpoint was not evaluated although an evaluator ran."""
    assert c.checkpoint is not None
    last = (f"its last evaluation was at step {c.evaluated_step}"
            if c.evaluated_step is not None else "it evaluated nothing")
    return (f"the final checkpoint {c.checkpoint.name} was not evaluated ({last}): "
            f"see the evaluator's log; TensorFlow's evaluator waits "
            f"EvalSpec.start_delay_secs, then throttle_secs between evaluations, "
            f"and timeouts.evaluator bounds that wait ({RECIPE})")
