"""The closing summary of a job that ran, once model_dir was read one last time: the
steps a preemption or a save request lost, the verdict, the task table, the closing lines,
the metrics table, and summary.json's document (docs/console.md)."""

from __future__ import annotations

import os
from typing import TYPE_CHECKING, Any

from launcher.ending import JobResult, TrainingView, own_evaluations, summary
from launcher.output.closing import Closing, final_read
from launcher.output.known_failures import known_of
from launcher.output.metrics_table import metrics_table
from launcher.output.summary import (
    closing_lines,
    ended_words,
    summary_doc,
    summary_table,
    task_rows,
    verdict,
)
from launcher.signals import PREEMPTED
from orchestrator.roles import TRAINERS

if TYPE_CHECKING:
    from launcher.model_dir import ModelDir
    from launcher.output.console import Console
    from launcher.plan import JobPlan
    from orchestrator.coordinator import Progress
    from orchestrator.decisions import TaskState


def last_read(result: JobResult, plan: JobPlan, epochs: int | None, seen: Progress,
              tasks: list[TaskState]) -> Closing:
    """model_dir read once more after every task ended (``seen``: the coordinator's last
    view; ``tasks``: the job's snapshot, whose own evaluations count)."""
    closing = final_read(plan.storage.reader(), plan.max_steps,
                         any(t.type == "evaluator" for t in plan.tasks), epochs,
                         [t.log for t in result.tasks if t.type in TRAINERS], plan.model_dir,
                         result.training_finished, seen.evaluated_step)
    closing.evaluated_step = own_evaluations(
        TrainingView(evaluated_step=closing.evaluated_step), tasks).evaluated_step
    return closing


def preempted_at(notice: dict[str, Any], seen: Progress, closing: Closing,
                 *more: int | None) -> dict[str, Any]:
    """The notice's record with the step training reached (the newest the coordinator saw,
    events or checkpoint, or ``more``: the trainers' output), the newest complete
    checkpoint's after the stop, and the steps lost between the two."""
    steps = [s for s in (seen.latest_step, seen.step, closing.final_step, *more)
             if s is not None]
    return {**notice, **summary(max(steps) if steps else None, closing.final_step)}


def settle(result: JobResult, closing: Closing, seen: Progress,
           shown_step: int | None) -> str | None:
    """The preemption's and the save request's records completed with the steps lost
    (``shown_step``: the newest the trainers printed); the verdict's reason when the
    closing read overrules the job's success, else None."""
    if result.preemption is not None:
        result.preemption = preempted_at(result.preemption, seen, closing)
    if result.save_request is not None and not result.save_request.get("saved"):
        result.save_request = preempted_at(     # what training lost: the steps reached
            result.save_request, seen, closing,  # past the newest checkpoint
            result.save_request.get("step_seen"), shown_step)
    return verdict(result, closing)


def report(result: JobResult, closing: Closing, storage: ModelDir, console: Console,
           run_dir: str) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """Print the closing summary; (the task rows, summary.json's document)."""
    rows = task_rows(result.tasks)
    table = summary_table(rows, os.path.join(run_dir, "summary.json"))
    console.info(f"job {ended_words(result.status)} after {result.duration:.1f}s: "
                 f"{result.reason}\n{table}")
    for line in closing_lines(result, closing):
        console.info(line)
    metrics = metrics_table(storage)
    if metrics:
        console.info(f"metrics of each checkpoint, evaluated afresh:\n{metrics}")
    if console.hidden:
        console.info(f"{console.hidden} lines of TensorFlow's routine output (deprecation "
                     "notices, banners, INFO, TensorBoard's routine lines) are only in the "
                     "task logs; --verbose shows them")
    failed = result.status not in (0, PREEMPTED) and result.status < 128
    return rows, summary_doc(result, closing, rows, known_of(result.tasks) if failed else None)
