"""The closing summary: one row per task (address, exit, duration, restarts, log)."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from launcher.job import TaskRun


def summary_table(runs: list[TaskRun]) -> str:
    """task, address, exit status, duration, log file: one row per task."""
    rows = [("task", "address", "exit", "duration", "restarts", "log")]
    for run in runs:
        rows.append((run.name, run.task.address, run.status_text(), f"{run.duration():.1f}s",
                     str(run.restarts), run.log_path))
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    return "\n".join("  ".join(c.ljust(w) for c, w in zip(r, widths)).rstrip() for r in rows)
