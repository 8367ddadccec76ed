"""Rows of cells as a table: the closing summary's, ``launch status``'s and ``launch
list``'s (launcher/output/summary.py builds the task rows, grouped.py the per-role lines)."""

from __future__ import annotations

from collections.abc import Sequence

HEADER = ("task", "address", "exit", "duration", "restarts", "log")


def with_gpus(rows: Sequence[tuple[str, ...]], gpus: list[list[str] | None],
              header: tuple[str, ...] = HEADER
              ) -> tuple[Sequence[tuple[str, ...]], tuple[str, ...]]:
    """The rows and header with a ``gpus`` column after the address, where any task has
    GPUs placed by the launcher (launcher/gpus.py); else as they are."""
    from launcher.gpus import shown

    if all(g is None for g in gpus):
        return rows, header
    return ([(*r[:2], shown(g), *r[2:]) for r, g in zip(rows, gpus)],
            (*header[:2], "gpus", *header[2:]))


def rows_table(rows: Sequence[tuple[str, ...]], header: tuple[str, ...] = HEADER) -> str:
    """Rows of cells as left-aligned columns under ``header`` (the summary's, and
    ``launch status`` and ``launch list`` from a run's recorded state)."""
    rows = [header, *rows]
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    return "\n".join("  ".join(c.ljust(w) for c, w in zip(r, widths)).rstrip() for r in rows)
