"""`launch report RUN_DIR`: a run's training loss and evaluation metrics against step, as a
PNG and a small self-contained HTML page written into RUN_DIR.

The run directory holds plan.json (which names model_dir), summary.json and the logs. The
training loss comes from the events files TensorFlow writes into model_dir (read without
TensorFlow, orchestrator.tfformats): Estimator's in model_dir itself (training) and
``eval*/``, Keras' TensorBoard callback's in ``train/`` and ``validation/`` (also one level
down, ``logs/train``). The evaluation metrics come from the evaluator's
``tfcluster_metrics.jsonl`` (orchestrator.metrics_file): each checkpoint's own values.
Without matplotlib the HTML page is still written, with the data and no picture.
"""

from __future__ import annotations

import argparse
import base64
import html
import io
import json
import os
import sys
from dataclasses import dataclass, field
from typing import Any

from launcher.errors import UsageError
from launcher.output.metrics_table import format_value, metric_columns
from launcher.records.registry import read_record
from orchestrator.metrics_file import METRICS_FILE, MetricsRecord, read_metrics
from orchestrator.tfformats import (
    EVENTS_DEPTH,
    EVENTS_PREFIX,
    Scalar,
    events_dir_kind,
    scalars_in_dir,
)

PNG_NAME = "report.png"
HTML_NAME = "report.html"
LOSS_TAGS = ("loss", "batch_loss", "epoch_loss", "train_loss", "training_loss")
# validation loss in Keras' validation/ (against step, else per epoch) and Estimator's eval/
VALIDATION_TAGS = ("evaluation_loss_vs_iterations", "loss", "epoch_loss")
NO_MATPLOTLIB = ("no PNG: matplotlib is not installed for this Python; pip install "
                 "'tfcluster[report]' (or matplotlib) and run launch report again")
QUALITY = ("accuracy", "auc")          # drawn in the second panel when present
SPLIT_STYLE = {"eval": "-", "train": "--"}


@dataclass
class RunData:
    """What a report shows of one run: its records, losses and metrics."""

    run_dir: str
    model_dir: str
    name: str = ""
    run_id: str = ""
    max_steps: int | None = None
    summary: dict = field(default_factory=dict)
    loss: list[Scalar] = field(default_factory=list)
    records: list[MetricsRecord] = field(default_factory=list)
    validation: list[Scalar] = field(default_factory=list)   # from events files

    @property
    def per_epoch(self) -> bool:
        """Keras' epoch summaries count epochs, not steps."""
        return bool(self.loss) and self.loss[0].tag.startswith("epoch_")


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="launch report",
        description="Draw a run's training loss and evaluation metrics against step: "
                    f"RUN_DIR/{PNG_NAME} and RUN_DIR/{HTML_NAME}.")
    p.add_argument("run_dir", metavar="RUN_DIR",
                   help="the run directory (.tfcluster/runs/RUN_ID) with plan.json")
    p.add_argument("--model-dir", help="read this model_dir instead of the plan's")
    p.add_argument("--out", metavar="DIR", help="write the files here (default: RUN_DIR)")
    return p


def main(argv: list[str]) -> int:
    args = _parser().parse_args(argv)
    data = load_run(args.run_dir, args.model_dir)
    out = args.out or args.run_dir
    try:
        os.makedirs(out, exist_ok=True)
    except OSError as e:    # a file there, no permission: bad input, nothing written
        raise UsageError(f"--out {out}: cannot make the directory: {e.strerror or e}") from None
    png = render_png(data)
    png_path = os.path.join(out, PNG_NAME)
    if png is not None:
        with open(png_path, "wb") as f:
            f.write(png)
    html_path = os.path.join(out, HTML_NAME)
    with open(html_path, "w", encoding="utf-8") as f:
        f.write(render_html(data, png))
    evals = {r.checkpoint for r in data.records}
    print(f"report of {data.run_id or data.run_dir}: {len(data.loss)} loss points, "
          f"{len(data.validation)} validation points, {len(evals)} evaluated checkpoints")
    print(f"  {png_path}\n  {html_path}" if png is not None
          else f"  {html_path}\n  {NO_MATPLOTLIB}")
    return 0


def event_dirs(model_dir: str) -> dict[str, list[str]]:
    """The directories under model_dir that hold events files, by what they record:
    "train" (model_dir itself, as Estimator writes, or a ``train/``), "validation" (Keras'
    ``validation/``, Estimator's ``eval*/``). Other directories are left out."""
    import fsspec

    fs, root = fsspec.core.url_to_fs(model_dir)
    root = root.rstrip("/")
    try:
        files = fs.find(root, maxdepth=EVENTS_DEPTH)
    except (FileNotFoundError, NotADirectoryError):
        return {}
    out: dict[str, list[str]] = {}
    for parent in sorted({f.rsplit("/", 1)[0] for f in files
                          if f.rsplit("/", 1)[-1].startswith(EVENTS_PREFIX)}):
        kind = events_dir_kind(parent, root)
        if kind is not None:
            split = "train" if kind == "train" else "validation"
            out.setdefault(split, []).append(fs.unstrip_protocol(parent))
    return out


def _pick(scalars: list[Scalar], tags: tuple[str, ...]) -> list[Scalar]:
    tag = next((t for t in tags if any(s.tag == t for s in scalars)), None)
    return [s for s in scalars if s.tag == tag]


def resolve_model_dir(model_dir: str, run_dir: str, plan: dict) -> str:
    """A relative model_dir is relative to where the job ran: the tasks' cwd, the launcher's
    cwd, or the directory holding .tfcluster/runs/RUN_ID."""
    if "://" in model_dir or os.path.isabs(model_dir):
        return model_dir
    bases = [t.get("cwd") for t in plan.get("tasks", []) if t.get("cwd")]
    bases += [os.getcwd(), os.path.join(os.path.abspath(run_dir), "..", "..", "..")]
    for base in bases:
        candidate = os.path.normpath(os.path.join(base, model_dir))
        if os.path.isdir(candidate):
            return candidate
    return model_dir


def read_summary(run_dir: str) -> dict:
    """summary.json, {} when there is none (a run still going, or killed); a damaged one is
    named in one line on stderr and left out of the report."""
    path = os.path.join(run_dir, "summary.json")
    problem: str | None
    try:
        with open(path, encoding="utf-8") as f:
            summary = json.load(f)
    except FileNotFoundError:
        return {}
    except (OSError, ValueError) as e:
        summary, problem = None, f"not JSON, or cut short ({e})"
    else:
        problem = None if isinstance(summary, dict) else f"{type(summary).__name__}, " \
                                                         "not an object"
    if problem is None:
        tasks = summary.get("tasks", [])
        numbers = [summary.get("duration", 0)] + [t.get("duration", 0) for t in tasks
                                                  if isinstance(t, dict)] \
            if isinstance(tasks, list) else []
        if not isinstance(tasks, list) or not all(isinstance(t, dict) for t in tasks) or \
                not all(isinstance(n, (int, float)) for n in numbers):
            problem = "not a summary of tfcluster"
    if problem:
        print(f"launch report: {path} is damaged ({problem}); the report has no task table",
              file=sys.stderr)
        return {}
    return summary


def load_run(run_dir: str, model_dir: str | None = None) -> RunData:
    plan_path = os.path.join(run_dir, "plan.json")
    if not os.path.isdir(run_dir):
        raise UsageError(f"run directory not found: {run_dir}")
    plan = read_record(plan_path, f"{run_dir} is not a run directory: it has no plan.json")
    if not isinstance(plan, dict) or not isinstance(plan.get("model_dir", ""), str):
        raise UsageError(f"{plan_path} is damaged: not a plan of tfcluster; give --model-dir "
                         "and a run directory of tfcluster")
    summary = read_summary(run_dir)
    model_dir = model_dir or resolve_model_dir(str(plan.get("model_dir", "")), run_dir, plan)
    if not model_dir:
        raise UsageError(f"{plan_path} names no model_dir; give --model-dir")
    from launcher.backends.environment import check_fsspec_driver

    check_fsspec_driver(model_dir)
    try:
        records = read_metrics(model_dir)
    except OSError as e:
        raise UsageError(f"model_dir {model_dir}: cannot read it "
                         f"({e.strerror or type(e).__name__})") from None
    dirs = event_dirs(model_dir)
    train = [s for d in dirs.get("train", []) for s in scalars_in_dir(d)]
    validation = [s for d in dirs.get("validation", []) for s in scalars_in_dir(d)]
    loss = _pick(train, LOSS_TAGS)
    tags = VALIDATION_TAGS if not (loss and loss[0].tag.startswith("epoch_")) else \
        ("epoch_loss",)       # on the same axis as the training loss
    return RunData(run_dir=run_dir, model_dir=model_dir, name=plan.get("name", ""),
                   run_id=plan.get("run_id", ""), max_steps=plan.get("max_steps"),
                   summary=summary, loss=sorted(loss, key=lambda s: (s.step, s.wall_time)),
                   records=records,
                   validation=sorted(_pick(validation, tags), key=lambda s: s.step))


def _series(records: list[MetricsRecord], split: str, name: str) -> tuple[list, list]:
    points = sorted((r.step, r.metrics[name]) for r in records
                    if r.split == split and name in r.metrics)
    return [p[0] for p in points], [p[1] for p in points]


def smooth(values: list[float], weight: float = 0.6) -> list[float]:
    """Exponential moving average, as TensorBoard's smoothing slider does."""
    out: list[float] = []
    for v in values:
        out.append(v if not out else weight * out[-1] + (1 - weight) * v)
    return out


def render_png(data: RunData) -> bytes | None:
    """Two panels against step: loss (training, and evaluated per checkpoint) and
    accuracy / AUC per checkpoint and split. None without matplotlib."""
    try:
        import matplotlib
    except ImportError:
        return None
    matplotlib.use("Agg")
    from matplotlib.figure import Figure

    fig = Figure(figsize=(11, 4.2), dpi=110, layout="constrained")
    ax_loss, ax_quality = fig.subplots(1, 2)
    title = f"{data.name} · run {data.run_id}" if data.run_id else data.run_dir
    fig.suptitle(title, fontsize=12)

    splits = sorted({r.split for r in data.records}, key=lambda s: (s != "eval", s))
    _draw_loss(ax_loss, data, splits)
    drew_quality = _draw_quality(ax_quality, data, splits)
    for ax, has_data in ((ax_loss, bool(data.loss or data.records or data.validation)),
                         (ax_quality, drew_quality)):
        _frame(ax, data, has_data, per_epoch=data.per_epoch and ax is ax_loss)
    buf = io.BytesIO()
    fig.savefig(buf, format="png")
    return buf.getvalue()


def _draw_loss(ax: Any, data: RunData, splits: list[str]) -> None:
    """The loss panel: training loss (logged and smoothed), validation loss from the
    events, and each checkpoint's evaluated loss per split."""
    if data.loss:
        steps = [s.step for s in data.loss]
        ax.plot(steps, [s.value for s in data.loss], color="0.75", linewidth=0.8,
                label="training loss (logged batches)")
        ax.plot(steps, smooth([s.value for s in data.loss]), color="0.25",
                linewidth=1.4, label="training loss (smoothed)")
    if data.validation:
        ax.plot([s.step for s in data.validation], [s.value for s in data.validation],
                ":", marker="s", markersize=4, color="C2", label="validation loss (events)")
    for split in splits:
        steps, values = _series(data.records, split, "loss")
        if steps:
            ax.plot(steps, values, SPLIT_STYLE.get(split, ":"), marker="o",
                    markersize=4, color="C3", label=f"{split} loss (checkpoint)")
    ax.set_title("loss")


def _draw_quality(ax: Any, data: RunData, splits: list[str]) -> bool:
    """The quality panel: accuracy / AUC per checkpoint and split; whether it drew any."""
    drew = False
    for i, name in enumerate(n for n in QUALITY if any(n in r.metrics for r in data.records)):
        for split in splits:
            steps, values = _series(data.records, split, name)
            if steps:
                ax.plot(steps, values, SPLIT_STYLE.get(split, ":"), marker="o",
                        markersize=4, color=f"C{i}", label=f"{split} {name}")
                drew = True
    ax.set_title("evaluation of each checkpoint")
    return drew


def _frame(ax: Any, data: RunData, has_data: bool, per_epoch: bool) -> None:
    """A panel's axis label, grid, max_steps line, and its legend or 'no data yet'."""
    ax.set_xlabel("epoch" if per_epoch else "global step")
    ax.grid(True, alpha=0.3)
    if data.max_steps and not per_epoch:
        ax.axvline(data.max_steps, color="0.3", linewidth=0.8, linestyle=":")
    if has_data:
        ax.legend(fontsize=8, loc="best")
    else:
        ax.text(0.5, 0.5, "no data yet", ha="center", va="center",
                transform=ax.transAxes, color="0.5")


def _table(header: list[str], rows: list[list[str]]) -> str:
    head = "".join(f"<th>{html.escape(h)}</th>" for h in header)
    body = "".join("<tr>" + "".join(f"<td>{html.escape(c)}</td>" for c in row) + "</tr>"
                   for row in rows)
    return f"<table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>"


def sampled(points: list[Scalar], most: int = 40) -> list[Scalar]:
    """At most ``most`` points, evenly spread, the last one kept."""
    if len(points) <= most:
        return list(points)
    every = len(points) / most
    picked = [points[int(i * every)] for i in range(most - 1)]
    return picked + [points[-1]]


def exit_words(task: dict) -> str:
    """A task's end as the console's table says it ("stopped (SIGTERM)", not "-15"):
    summary.json's words for it (``status``), else its exit status."""
    return str(task.get("status") or task.get("exit", ""))


def no_records(data: RunData) -> str:
    """What the page says without a fresh evaluation: TensorFlow's own evaluator (eval/)
    or Keras' validation may still have evaluated (the validation series)."""
    if data.validation:
        n = len(data.validation)
        return (f"No checkpoint was evaluated afresh (no {METRICS_FILE}); the validation "
                f"series below holds {n} evaluation{'s' if n > 1 else ''} (TensorFlow's "
                f"evaluator, or Keras' validation), the last at step "
                f"{data.validation[-1].step}.")
    return "No checkpoint was evaluated."


def render_html(data: RunData, png: bytes | None) -> str:
    """One page, no outside files: the picture (when matplotlib drew one), the latest
    metrics, every evaluated checkpoint, the loss points, and the tasks."""
    columns = metric_columns(data.records, limit=8)
    ordered = sorted(data.records, key=lambda r: (r.step, r.split != "eval", r.split))
    rows = [[str(r.step), r.split, *(format_value(r.metrics.get(c)) for c in columns),
             os.path.basename(r.checkpoint)] for r in ordered]
    status = data.summary.get("reason") or "no summary (still running, or interrupted)"
    if "duration" in data.summary:
        status += f" after {data.summary['duration']:.1f}s"
    last_loss = f"{data.loss[-1].value:.4f} at step {data.loss[-1].step}" if data.loss else "-"
    tasks = [[t.get("task", ""), t.get("address", ""), exit_words(t),
              f"{t.get('duration', 0):.1f}s", str(t.get("restarts", 0))]
             for t in data.summary.get("tasks", [])]
    axis = "epoch" if data.per_epoch else "step"
    if png is not None:
        image = ("<img alt='loss and metrics against step' src='data:image/png;base64,"
                 f"{base64.b64encode(png).decode('ascii')}'>")
    else:
        image = f"<p class='note'>{html.escape(NO_MATPLOTLIB)}.</p>"
    loss_rows = [[str(s.step), format_value(s.value), "training"] for s in sampled(data.loss)]
    loss_rows += [[str(s.step), format_value(s.value), "validation"]
                  for s in sampled(data.validation)]
    parts = [
        "<!DOCTYPE html><html><head><meta charset='utf-8'>",
        f"<title>tfcluster report: {html.escape(data.name or data.run_dir)}</title>",
        "<style>body{font-family:system-ui,sans-serif;margin:2em;color:#222}"
        "table{border-collapse:collapse;margin:1em 0}td,th{padding:3px 10px;"
        "border-bottom:1px solid #ddd;text-align:right}th{background:#f4f4f4}"
        "img{max-width:100%}</style></head><body>",
        f"<h1>{html.escape(data.name)} <small>run {html.escape(data.run_id)}</small></h1>",
        f"<p>{html.escape(status)} · max_steps {data.max_steps} · model_dir "
        f"<code>{html.escape(data.model_dir)}</code> · last training loss {last_loss}</p>",
        image,
        "<h2>Evaluation of each checkpoint</h2>",
        "<p>Each row is a checkpoint evaluated afresh by the evaluator (new metric state), "
        "not the running mean a trainer logs.</p>",
        _table(["step", "split", *columns, "checkpoint"], rows) if rows
        else f"<p>{html.escape(no_records(data))}</p>",
    ]
    parts += [f"<h2>Loss against {axis}</h2>",
              _table([axis, "loss", "series"], loss_rows) if loss_rows
              else "<p>No loss in the events files.</p>"]
    if tasks:
        parts += ["<h2>Tasks</h2>", _table(["task", "address", "exit", "duration", "restarts"],
                                           tasks)]
    parts.append("</body></html>")
    return "\n".join(parts)
