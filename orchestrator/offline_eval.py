"""Offline evaluation of an exported model: AUC, accuracy and log loss on a data file.

    launch evaluate --model EXPORT_DIR --data FILE.csv [--label label] [--python PY]
    python -m orchestrator.offline_eval --model EXPORT_DIR --data FILE.csv

EXPORT_DIR is a SavedModel, or a directory of timestamped exports (``model_dir/export/NAME``,
the newest is used). FILE is CSV with a header (local path or fsspec URL); ``--label`` names
the 0/1 column, every other column is a feature. The rows are fed to a signature of the
model: as serialized ``tf.train.Example`` when it takes one string tensor (an Estimator's
parsing serving input: numbers become float features, other values bytes), else column by
column under the signature's input names. The probability of class 1 comes from the
``logistic`` / ``probabilities`` / ``scores`` / single output. Metrics are computed here in
plain Python (orchestrator.binary_metrics: exact rank AUC, no sklearn).

``launch evaluate`` runs the TensorFlow part in a child process of ``--python`` (the model's
Python; default: this one), so the launcher itself never imports TensorFlow.
"""

from __future__ import annotations

import argparse
import csv
import io
import json
import os
import subprocess
import sys
from collections.abc import Sequence
from typing import Any

import fsspec

from orchestrator.binary_metrics import binary_metrics

SIGNATURES = ("predict", "serving_default", "regression", "classification")
PROBABILITY_OUTPUTS = ("logistic", "probabilities", "scores", "outputs", "output_0")
USAGE_ERROR = 2


class BadInput(Exception):
    """A problem with the command line or the files: exit status 2."""


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="launch evaluate",
        description="Evaluate an exported model (SavedModel) on a CSV file: AUC, accuracy, "
                    "log loss.")
    p.add_argument("--model", required=True, metavar="EXPORT_DIR",
                   help="a SavedModel directory, or a directory of timestamped exports")
    p.add_argument("--data", required=True, metavar="FILE", help="CSV with a header row")
    p.add_argument("--label", default="label", help="the 0/1 label column (default: label)")
    p.add_argument("--signature", help=f"signature to call (default: first of {SIGNATURES})")
    p.add_argument("--string-columns", default="", metavar="A,B",
                   help="columns fed as strings even when they look like numbers")
    p.add_argument("--batch-size", type=int, default=1024)
    p.add_argument("--python", metavar="PY",
                   help="the Python (with TensorFlow) that loads the model; default: this one")
    p.add_argument("--predictions", metavar="OUT",
                   help="also write label,probability per row to this CSV")
    p.add_argument("--json", action="store_true", help="print the metrics as JSON")
    p.add_argument("--in-process", action="store_true", help=argparse.SUPPRESS)
    return p


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    args = _parser().parse_args(argv)
    if not args.in_process:
        python = args.python or sys.executable
        rest = [a for a in argv if a != "--in-process"]
        cmd = [python, "-m", "orchestrator.offline_eval", "--in-process", *rest]
        env = dict(os.environ)
        env.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
        try:
            return subprocess.run(cmd, env=env, stdin=subprocess.DEVNULL).returncode
        except OSError as e:
            print(f"launch evaluate: error: cannot run {python}: {e}", file=sys.stderr)
            return USAGE_ERROR
    try:
        return run(args)
    except BadInput as e:
        print(f"launch evaluate: error: {e}", file=sys.stderr)
        return USAGE_ERROR


def run(args: argparse.Namespace) -> int:
    if args.batch_size < 1:
        raise BadInput("--batch-size must be at least 1")
    model = find_saved_model(args.model)
    header, rows = read_csv(args.data)
    if args.label not in header:
        raise BadInput(f"{args.data}: no label column {args.label!r} "
                       f"(columns: {', '.join(header)})")
    try:
        labels = [int(float(r[args.label])) for r in rows]
    except ValueError as e:
        raise BadInput(f"{args.data}: label column {args.label!r}: {e}") from None
    features = [c for c in header if c != args.label]
    strings = {c for c in args.string_columns.split(",") if c}
    scores = predict(model, rows, features, strings, args.signature, args.batch_size)
    try:
        result = binary_metrics(labels, scores)
    except ValueError as e:
        raise BadInput(f"{args.data}: {e}") from None
    if args.predictions:
        with fsspec.open(args.predictions, "w", encoding="utf-8") as f:
            f.write("label,probability\n")
            f.writelines(f"{y},{p!r}\n" for y, p in zip(labels, scores))
    if args.json:
        print(json.dumps({"model": model, "data": args.data, **result.as_dict()}))
    else:
        print(f"model     {model}\ndata      {args.data} ({result.examples} examples, "
              f"{result.positives} positive)\nAUC       {result.auc:.6f}\n"
              f"accuracy  {result.accuracy:.6f}\nlog loss  {result.log_loss:.6f}")
    return 0


def find_saved_model(path: str) -> str:
    """``path`` when it holds saved_model.pb, else its newest subdirectory that does."""
    if os.path.isfile(os.path.join(path, "saved_model.pb")):
        return path
    if not os.path.isdir(path):
        raise BadInput(f"--model: no such directory: {path}")
    found = sorted(d.path for d in os.scandir(path)
                   if d.is_dir() and os.path.isfile(os.path.join(d.path, "saved_model.pb")))
    if not found:
        raise BadInput(f"--model: {path} holds no saved_model.pb (nor a subdirectory with one)")
    return found[-1]


def read_csv(path: str) -> tuple[list[str], list[dict[str, str]]]:
    try:
        with fsspec.open(path, "r", encoding="utf-8") as f:
            text = f.read()
    except FileNotFoundError:
        raise BadInput(f"--data: file not found: {path}") from None
    reader = csv.DictReader(io.StringIO(text))
    rows = list(reader)
    if not reader.fieldnames or not rows:
        raise BadInput(f"--data: {path} has no header or no rows")
    return list(reader.fieldnames), rows


def _is_number(value: str) -> bool:
    try:
        float(value)
    except ValueError:
        return False
    return True


def to_examples(rows: list[dict[str, str]], features: list[str], strings: set[str]) -> list:
    """Serialized tf.train.Example per row: numbers as float_list, the rest as bytes_list."""
    import tensorflow as tf

    numeric = {c for c in features if c not in strings and all(_is_number(r[c]) for r in rows)}
    out = []
    for r in rows:
        feature = {}
        for c in features:
            if c in numeric:
                feature[c] = tf.train.Feature(float_list=tf.train.FloatList(value=[float(r[c])]))
            else:
                feature[c] = tf.train.Feature(
                    bytes_list=tf.train.BytesList(value=[r[c].encode("utf-8")]))
        example = tf.train.Example(features=tf.train.Features(feature=feature))
        out.append(example.SerializeToString())
    return out


def _probability(outputs: dict, signature: str):
    """Probability of class 1 as a 1-D numpy array, from a signature's outputs."""
    for name in PROBABILITY_OUTPUTS:
        if name in outputs:
            value = outputs[name].numpy()
            break
    else:
        if len(outputs) != 1:
            raise BadInput(f"signature {signature!r}: no probability output among "
                           f"{sorted(outputs)} (looked for {', '.join(PROBABILITY_OUTPUTS)})")
        value = next(iter(outputs.values())).numpy()
    if value.ndim == 2 and value.shape[1] == 2:
        return value[:, 1]
    if value.ndim == 2 and value.shape[1] == 1:
        return value[:, 0]
    if value.ndim == 1:
        return value
    raise BadInput(f"signature {signature!r}: output of shape {value.shape} is not one "
                   "probability per example")


def predict(model: str, rows: list[dict[str, str]], features: list[str], strings: set[str],
            signature: str | None, batch_size: int) -> list[float]:
    """The positive class's probability for every row, from the export's signature, in
    batches of ``batch_size``."""
    name, fn = _signature(model, signature)
    inputs = fn.structured_input_signature[1]
    as_examples = _takes_examples(inputs, features)
    if not as_examples:
        missing = [k for k in inputs if k not in features]
        if missing:
            raise BadInput(f"signature {name!r} takes {sorted(inputs)}; the data file lacks "
                           f"{missing}")
    scores: list[float] = []
    for start in range(0, len(rows), batch_size):
        chunk = rows[start:start + batch_size]
        feed = _examples_feed(inputs, chunk, features, strings) if as_examples else \
            _columns_feed(inputs, chunk)
        scores += [float(p) for p in _probability(fn(**feed), name)]
    return scores


def _signature(model: str, signature: str | None) -> tuple[str, Any]:
    """The signature asked for, else the first of SIGNATURES the export has, else its first."""
    import tensorflow as tf

    loaded = tf.saved_model.load(model)
    names = list(loaded.signatures.keys())
    name = signature or next((s for s in SIGNATURES if s in names), names[0] if names else None)
    if name is None or name not in loaded.signatures:
        raise BadInput(f"--signature: {model} has no signature {name!r} (it has {names})")
    return name, loaded.signatures[name]


def _takes_examples(inputs: dict[str, Any], features: list[str]) -> bool:
    """The signature takes serialized tf.Examples (one string input, not a feature)."""
    import tensorflow as tf

    return len(inputs) == 1 and next(iter(inputs.values())).dtype == tf.string \
        and next(iter(inputs)) not in features


def _examples_feed(inputs: dict[str, Any], chunk: list[dict[str, str]], features: list[str],
                   strings: set[str]) -> dict[str, Any]:
    import tensorflow as tf

    return {next(iter(inputs)): tf.constant(to_examples(chunk, features, strings))}


def _columns_feed(inputs: dict[str, Any], chunk: list[dict[str, str]]) -> dict[str, Any]:
    """One tensor per input, from the rows' column of that name, of the input's dtype."""
    import tensorflow as tf

    feed = {}
    for key, spec in inputs.items():
        values: list[Any] = [r[key] for r in chunk]
        if spec.dtype != tf.string:
            values = [float(v) for v in values]
        tensor = tf.cast(tf.constant(values), spec.dtype)
        if spec.shape.rank == 2:
            tensor = tf.expand_dims(tensor, -1)
        feed[key] = tensor
    return feed


if __name__ == "__main__":
    sys.exit(main())
