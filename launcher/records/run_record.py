"""The directory of one attached run as the run goes: state.json and events.jsonl,
plan.json (``PlanFile``), model_dir's lease, and what the directory could not take."""

from __future__ import annotations

import contextlib
import os
from functools import partial
from typing import TYPE_CHECKING, Any, Callable

from launcher.records.lease import acquire
from launcher.records.plan_file import PlanFile
from launcher.records.registry import RunLog, RunState
from launcher.records.unwritten import Unwritten

if TYPE_CHECKING:
    from launcher.plan import JobPlan
    from launcher.records.lease import Holder, Lease


class RunRecord:
    """``state`` (state.json, open), ``events`` (events.jsonl), ``unwritten`` (what a full
    or vanished run directory did not get, said once per file by ``info``), ``lease``
    (model_dir's, once taken)."""

    def __init__(self, run_dir: str, state: RunState, info: Callable[[str], None]):
        self.run_dir, self.state, self.info = run_dir, state, info
        self.events = RunLog(os.path.join(run_dir, "events.jsonl"), state)
        self.unwritten = Unwritten(info)
        self.events.on_error = partial(self.unwritten.failed, "events.jsonl")
        state.on_error = partial(self.unwritten.failed, "state.json")
        self.lease: Lease | None = None

    def plan_file(self, plan: JobPlan) -> PlanFile:
        return PlanFile(self.run_dir, plan, on_error=partial(self.unwritten.failed, "plan.json"))

    def take_lease(self, storage: Any, run_id: str, force: bool, **holder: Any) -> None:
        """model_dir's lease for this run (``holder``: lease.acquire's backend, handle and
        holds), heartbeat running; a run that loses it to a --force says so."""
        def lost(by: Holder) -> None:
            self.info(f"the model_dir lease was taken by run {by.run_id} on {by.host} "
                      "(--force): two runs now write model_dir")
            self.events.write("lease_lost", run_id=by.run_id, host=by.host)

        self.lease = acquire(storage, run_id, self.run_dir, force, warn=self.info, **holder)
        self.lease.start_heartbeat(on_lost=lost)
        self.state.update(lease=self.lease.describe())

    def finish(self, status: int, reason: str, requeued: bool,
               summary: dict[str, Any] | None = None, step: int | None = None) -> None:
        """state.json's end, the lease released first (a requeued run keeps it: it comes
        back under the same run id)."""
        if self.lease is not None:
            self.lease.release(keep=requeued)
            with contextlib.suppress(OSError):
                self.state.update(lease={**self.lease.describe(), "held": requeued})
        self.state.finish(status, reason, summary, requeued=requeued, step=step)
