"""The evaluator's metrics as a small table: step, split and the main metrics.

Read from ``<model_dir>/tfcluster_metrics.jsonl`` (orchestrator.metrics_file) through fsspec;
shown at the end of a job and by ``launch report``.
"""

from __future__ import annotations

from launcher.model_dir import ModelDir
from orchestrator.metrics_file import MetricsRecord

# Shown first when present, in this order; other metrics follow by name.
PREFERRED = ("loss", "accuracy", "auc", "average_loss", "precision", "recall", "log_loss")
MAX_COLUMNS = 6
MAX_ROWS = 12


def metric_columns(records: list[MetricsRecord], limit: int = MAX_COLUMNS) -> list[str]:
    """The metric names to show: the preferred ones first, then the rest by name."""
    names = {name for r in records for name in r.metrics}
    ordered = [n for n in PREFERRED if n in names] + sorted(names - set(PREFERRED))
    return ordered[:limit]


def format_value(value: float | None) -> str:
    if value is None:
        return "-"
    return f"{value:.4f}" if abs(value) < 1000 else f"{value:.4g}"


def render_table(records: list[MetricsRecord], max_rows: int = MAX_ROWS) -> str:
    """A text table, one row per checkpoint and split, ordered by step; when there are more
    than ``max_rows`` rows, the first ones are left out (and counted)."""
    if not records:
        return ""
    columns = metric_columns(records)
    ordered = sorted(records, key=lambda r: (r.step, r.split != "eval", r.split, r.time))
    hidden = max(0, len(ordered) - max_rows)
    rows = [["step", "split", *columns]]
    for r in ordered[hidden:]:
        rows.append([str(r.step), r.split, *(format_value(r.metrics.get(c)) for c in columns)])
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    lines = ["  ".join(cell.rjust(w) if i != 1 else cell.ljust(w)
                       for i, (cell, w) in enumerate(zip(row, widths))).rstrip()
             for row in rows]
    if hidden:
        lines.insert(1, f"({hidden} earlier rows not shown)")
    return "\n".join(lines)


def metrics_table(model_dir: ModelDir, max_rows: int = MAX_ROWS) -> str:
    """The table of a model_dir's metrics file; "" when there is none (or it is empty)."""
    try:
        records = model_dir.metrics()
    except Exception:  # unreachable storage must not fail the end of a job
        return ""
    return render_table(records, max_rows)
