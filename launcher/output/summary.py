"""The closing summary: one row per task (address, exit, duration, restarts, log)."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from launcher.job import TaskRun

HEADER = ("task", "address", "exit", "duration", "restarts", "log")


def summary_table(runs: list[TaskRun]) -> str:
    """task, address, exit status, duration, log file: one row per task."""
    return rows_table([(run.name, run.task.address, run.status_text(),
                        f"{run.duration():.1f}s", str(run.restarts), run.log_path)
                       for run in runs])


def rows_table(rows: list[tuple[str, ...]], header: tuple[str, ...] = HEADER) -> str:
    """Rows of cells as left-aligned columns under ``header`` (the summary's, and
    ``launch status`` and ``launch list`` from a run's recorded state)."""
    rows = [header, *rows]
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    return "\n".join("  ".join(c.ljust(w) for c, w in zip(r, widths)).rstrip() for r in rows)
