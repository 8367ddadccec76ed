"""plan.json of a run: the plan as plain data, secrets in the tasks' environments masked
(what ``--dry-run`` prints too), written once every task started."""

from __future__ import annotations

import os
import threading
from typing import TYPE_CHECKING, Any, Callable

from launcher.records.registry import json_pieces
from launcher.redact import redact_env

if TYPE_CHECKING:
    from launcher.plan import JobPlan


def public_plan(plan: JobPlan) -> dict[str, Any]:
    """The plan as plain data, secrets in the tasks' environments masked: what --dry-run
    prints and plan.json keeps."""
    doc = plan.to_dict()
    for task in doc["tasks"]:
        task["env"] = redact_env(task["env"])
    return doc


def write_plan(run_dir: str, plan: JobPlan) -> None:
    """plan.json: a task per line (json's C encoder; with an indent, 1,000 tasks of 1,000
    addresses each took seconds before the first start)."""
    with open(os.path.join(run_dir, "plan.json"), "w", encoding="utf-8") as f:
        f.writelines(json_pieces(public_plan(plan)))


class PlanFile:
    """plan.json of a run, written once every task started (``write``, the run state's
    ``on_running``), or at the end of a job that ended first: 1,000 tasks' plan is ~20 MB
    of JSON, not on the way to their start. ``replan``: new ports, written at once."""

    def __init__(self, run_dir: str, plan: JobPlan, on_error: Callable[[OSError], None]):
        self.run_dir, self.plan, self.written = run_dir, plan, False
        self.on_error = on_error
        self._lock = threading.Lock()

    def write(self) -> None:
        with self._lock:
            if not self.written:
                self.written = True
                self._write()

    def replan(self, plan: JobPlan) -> None:
        with self._lock:
            self.plan = plan
            if self.written:
                self._write()

    def _write(self) -> None:
        try:
            write_plan(self.run_dir, self.plan)
        except OSError as e:    # a full or vanished run_dir: said once, the job goes on
            self.on_error(e)
