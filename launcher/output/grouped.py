"""Task rows grouped by role, for jobs of many tasks: the closing summary and ``launch
status`` show one line per role (how many tasks, their exits counted, the spread of their
durations, restarts) and name the outliers in full rows: the tasks that failed, those
restarted and the slowest. Jobs of up to ``GROUP_ABOVE`` tasks keep one row per task;
``summary.json`` and ``launch status --all`` always have every row (docs/console.md).
"""

from __future__ import annotations

import collections
import re

from launcher.output.table import rows_table, with_gpus

GROUP_ABOVE = 16     # more tasks than this: grouped by role
OUTLIERS = 5         # rows named per kind of outlier (failed, restarted)
SLOWEST = 3
ROLE_HEADER = ("role", "tasks", "exits", "duration min / median / max", "restarts")

# A row as rows_table takes it: task, address, exit in words, duration ("12.3s"),
# restarts, log.
Row = tuple[str, ...]      # task, address, exit, duration, restarts, log


def failed(exit_text: str) -> bool:
    """An exit in words that is a failure: a non-zero status, or killed (not stopped by
    the launcher)."""
    return bool(re.fullmatch(r"-?[1-9]\d*", exit_text)) or exit_text.startswith("killed")


def _secs(row: Row) -> float:
    try:
        return float(row[3].rstrip("s"))
    except ValueError:
        return 0.0


def role_lines(rows: list[Row]) -> list[tuple[str, ...]]:
    """One line per role, in the order roles first appear."""
    from statistics import median  # here: not on a small job's way

    by_role: dict[str, list[Row]] = {}
    for row in rows:
        by_role.setdefault(row[0].split(":")[0], []).append(row)
    out: list[tuple[str, ...]] = []
    for role, group in by_role.items():
        exits = collections.Counter(r[2] for r in group)
        words = ", ".join(f"{e} ×{n}" if n > 1 else e for e, n in exits.most_common())
        secs = [_secs(r) for r in group]
        spread = (f"{min(secs):.1f}s / {median(secs):.1f}s / {max(secs):.1f}s"
                  if len(secs) > 1 else f"{secs[0]:.1f}s")
        restarts = sum(int(r[4]) for r in group if r[4].isdigit())
        out.append((role, str(len(group)), words, spread, str(restarts)))
    return out


def outliers(rows: list[Row]) -> tuple[list[tuple[str, ...]], list[str]]:
    """(rows named in full with why, lines saying how many more there are): the failed,
    the restarted, and the slowest of the roles of many tasks among those that exited 0."""
    picked: dict[str, tuple[str, ...]] = {}
    more = []
    roles = collections.Counter(r[0].split(":")[0] for r in rows)
    done = [r for r in rows if r[2] == "0" and roles[r[0].split(":")[0]] > 1]
    kinds = (("failed", [r for r in rows if failed(r[2])]),
             ("restarted", [r for r in rows if r[4].isdigit() and int(r[4]) > 0]),
             ("slowest", sorted(done, key=_secs, reverse=True)[:SLOWEST]))
    for why, found in kinds:
        for row in found[:OUTLIERS]:
            if row[0] not in picked:
                picked[row[0]] = (*row[:5], why, row[5])
        if len(found) > OUTLIERS:
            more.append(f"... and {len(found) - OUTLIERS} more {why}")
    return list(picked.values()), more


def grouped_table(rows: list[Row], every_row: str,
                  gpus: list[list[str] | None] | None = None) -> str:
    """Rows as a table: one row per task up to GROUP_ABOVE tasks (with each task's
    ``gpus`` where any has some), else one line per role and the outliers; ``every_row``
    says where every row is (summary.json, --all)."""
    if len(rows) <= GROUP_ABOVE:
        return rows_table(*with_gpus(rows, gpus or [None] * len(rows)))
    lines = [rows_table(role_lines(rows), ROLE_HEADER)]
    named, more = outliers(rows)
    if named:
        header = ("task", "address", "exit", "duration", "restarts", "why", "log")
        lines += ["outliers:", rows_table(named, header), *more]
    lines.append(f"every task's row: {every_row}")
    return "\n".join(lines)
