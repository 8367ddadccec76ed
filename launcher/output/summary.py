"""The closing summary: one row per task (address, exit, duration, restarts, log), the
closing lines (where training ended, restarts as incidents, launcher/output/closing.py's notes),
and summary.json.

Exit status rule (docs/ending.md), recorded in summary.json: 0 when training finished and
every task ended, whatever the evaluator did short of failing; 1 when a task failed,
including an evaluator that failed after training finished (``"training": "finished"``,
``"evaluation": "failed"`` then say exactly that); 128+N when interrupted by signal N.
Training finished means the user's script (its primary task) exited 0 by itself, or the
newest complete checkpoint holds a step at or past max_steps: a job the launcher ended while
its newest checkpoint is short of max_steps (or none was written, or its step cannot be
read) failed (``verdict``; ``"training": "stopped short"``), whatever the events file said.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from launcher.signals import PREEMPTED
from orchestrator.roles import primary_task

if TYPE_CHECKING:
    from launcher.ending import JobResult
    from launcher.output.closing import Closing
    from orchestrator.decisions import TaskState

STATUS_RULE = ("0: training finished and every task ended (an evaluator that did not "
               "evaluate the final checkpoint is a note, not a failure); training finished "
               "means the user's script exited 0 by itself or the newest complete checkpoint "
               "is at or past max_steps; 1: a task failed, an evaluator failing after "
               "training finished included, or the launcher ended training while the newest "
               "checkpoint was short of max_steps, or stopped a task still at work "
               "(timeouts.save: a save cut short); 2: bad input; 75: preempted (SIGTERM: the "
               "chief saved a checkpoint first, the next launch resumes from it); 128+N: "
               "interrupted by signal N")
SHORT = "training was ended by the launcher, but "
SAVED_ON_REQUEST = "saved on request at max_steps"
CUT = "work was cut short: "      # a task stopped in the middle of a save (timeouts.save)

def task_rows(tasks: list[TaskState]) -> list[dict[str, Any]]:
    """One row per task, from the tasks' snapshots: what summary.json keeps, what
    ``launcher.run`` returns, what state.json (``launch status``) and the closing table
    show. ``status``: the exit in words."""
    return [{"task": t.name, "address": t.address, "gpus": t.gpus, "exit": t.status,
             "status": t.words(), "stopped": t.stopped, "restarts": t.restarts,
             "duration": round(t.duration, 3), "log": t.log} for t in tasks]


def row_cells(row: dict[str, Any], state: str | None = None, secs: float | None = None,
              log: str | None = None) -> tuple[str, ...]:
    """A task row as the table's cells (HEADER); ``state``, ``secs`` and ``log`` replace
    the row's own when given."""
    return (row["task"], row["address"], state if state is not None else row["status"],
            f"{secs if secs is not None else row['duration']:.1f}s",
            str(row.get("restarts") or 0),
            log if log is not None else row["log"])


def summary_table(rows: list[dict[str, Any]], every_row: str = "summary.json") -> str:
    """task, address, exit status, duration, restarts, log file: one row per task (and
    each task's GPUs where the launcher placed any); for many tasks, one line per role and
    the outliers (launcher/output/grouped.py)."""
    from launcher.output.grouped import grouped_table

    return grouped_table([row_cells(row) for row in rows], every_row,
                         [row.get("gpus") for row in rows])


def evaluation_of(result: JobResult, closing: Closing) -> str:
    """``none``, ``evaluated``, ``not evaluated`` or ``failed`` (the evaluator failed)."""
    failed = any(t.type == "evaluator" and t.status not in (None, 0) and not t.stopped
                 for t in result.tasks)
    return "failed" if failed and closing.evaluation != "evaluated" else closing.evaluation


def script_ended(tasks: list[TaskState]) -> bool:
    """Whether the user's script ended training itself: its primary task (chief, else
    master, else worker 0) exited 0 without being stopped."""
    primary = primary_task(tasks)
    return primary is not None and primary.status == 0 and not primary.stopped


def ended_words(status: int) -> str:
    """How the closing line names the end, as the run registry names the run's state
    (``launch list``): a run stopped by a signal (Ctrl-C, ``launch cancel``) was cancelled,
    not failed."""
    if status == 0:
        return "succeeded"
    if status == PREEMPTED:
        return f"preempted (exit status {status})"
    if status > 128:
        return f"cancelled (exit status {status})"
    return f"FAILED (exit status {status})"


def verdict(result: JobResult, closing: Closing) -> str | None:
    """Why a job whose tasks all ended did not succeed after all (None: it did): the
    launcher stopped a task in the middle of its work (``timeouts.save``: a save or an
    export cut short), or ended training (max_steps seen in the chief's events file,
    timeouts.finish) while the newest complete checkpoint is short of max_steps."""
    if result.status == 0 and result.cut_short:
        return f"{CUT}{'; '.join(result.cut_short)}"
    if result.status != 0 or closing.max_steps is None or not closing.readable or \
            script_ended(result.tasks):
        return None
    ckpt, step = closing.checkpoint, closing.final_step
    if step is not None and step >= closing.max_steps:
        return None
    if ckpt is None:
        where = "no checkpoint was written into model_dir"
    elif step is None:
        where = f"the newest checkpoint {ckpt.name} has no step to compare with max_steps " \
                "(neither in its name nor in the checkpoint)"
    else:
        where = f"the newest complete checkpoint {ckpt.name} is short of max_steps " \
                f"{closing.max_steps}"
    lost = unsaved_words(result.save_request, step)
    primary = primary_task(result.tasks)
    who = primary.name if primary is not None else "the primary task"
    return f"{SHORT}{where}, and {who} did not exit 0 by itself" + (
        f": {lost}" if lost else "")


# Which change to a script that cannot save on request keeps its training at the end.
ROUTE = ("to keep them, have the script stop at max_steps itself (TrainSpec(max_steps="
         "int(os.environ['TFCLUSTER_MAX_STEPS'])), or `python -m orchestrator.at_max_steps`; "
         "a TF1 loop: StopAtStepHook; a custom loop: `if orchestrator.preemption.requested(): "
         "save; break`; a MultiWorkerMirroredStrategy loop: PreemptionCheckpointHandler) "
         "(docs/ending.md)")


def unsaved_words(record: dict[str, Any] | None, saved: int | None) -> str | None:
    """How many steps a run whose save request at max_steps went unanswered trained and
    lost: the freshest step reached against the newest complete checkpoint; None when the
    request saved, or none was sent."""
    if not record or record.get("saved"):
        return None
    reached = record.get("step_reached")
    if reached is None:
        return "the steps trained since the newest checkpoint were lost (the step reached " \
               "is not known)"
    lost = max(0, reached - saved if saved is not None else reached)
    since = f"since the checkpoint at step {saved}" if saved is not None else \
        "(no checkpoint was written)"
    return f"{lost} step{'s' if lost != 1 else ''} trained {since} were lost: step " \
           f"{reached} was reached"


def unsaved_line(record: dict[str, Any] | None, closing: Closing) -> str | None:
    """The closing line of a run whose trainers were stopped unsaved at the end: the steps
    lost, why the save request did not save, and the change to the script that prevents
    it; None when a checkpoint covers max_steps."""
    lost = unsaved_words(record, closing.final_step)
    if lost is None or record is None or (
            closing.final_step is not None and closing.max_steps is not None and
            closing.final_step >= closing.max_steps):
        return None
    return f"not saved at max_steps: {lost} (the save request: {record.get('outcome')}); " \
           f"{ROUTE}"


def training_of(result: JobResult) -> str:
    if result.reason.startswith(CUT):
        return "cut short"
    if result.reason.startswith(SHORT):
        return "stopped short"
    if result.training_finished:
        return "finished"
    if result.preemption is not None and result.status == PREEMPTED:
        return "preempted"
    return "interrupted" if result.status >= 128 else "failed" if result.status else "ended"


def closing_lines(result: JobResult, closing: Closing) -> list[str]:
    """Where training ended, each restart incident, the notes of the last read, and what
    the run directory could not take (a full disk)."""
    lines = []
    request = result.save_request
    outcome = closing.outcome_line(SAVED_ON_REQUEST if request and request.get("saved")
                                   else None)
    if outcome:
        lines.append(outcome)
    if result.preemption is not None:
        lines.append(closing_line(result.preemption, result.status))
    unsaved = unsaved_line(request, closing)
    if unsaved:
        lines.append(unsaved)
    if result.incidents:
        n = len(result.incidents)
        lines.append(f"{n} restart{'s' if n > 1 else ''}:")
        lines += [f"  {i['cause']}: restarted {', '.join(i['tasks'])} ({i['reason']})"
                  for i in result.incidents]
    if result.lost:
        n = len(result.lost)
        lines.append(f"{n} worker{'s' if n > 1 else ''} lost (roles.worker.minimum: the "
                     f"job went on without {'them' if n > 1 else 'it'}):")
        lines += [lost_row(entry) for entry in result.lost]
    lines += result.waited
    lines += [f"cut short: {cut}" for cut in result.cut_short]
    lines += [f"note: {note}" for note in closing.notes]
    return lines + result.unwritten


def lost_row(entry: dict[str, Any]) -> str:
    """One lost worker in the closing lines: when, why, its unread shard, its return."""
    line = f"  {entry['task']} at {entry['at']:.1f}s: {entry['reason']}"
    back = entry.get("returned_at")
    if entry.get("shard"):
        index, count = entry["shard"]
        line += f"; shard {index} of {count} unread " + (
            "from then on" if back is None else "until it was back")
    if back is not None:
        line += f"; its host answered again and it was started again at {back:.1f}s"
    return line


def summary_doc(result: JobResult, closing: Closing, rows: list[dict[str, Any]],
                known: dict[str, str] | None = None) -> dict[str, Any]:
    """summary.json; ``rows``: one per task (task_rows); ``known``: the known failure a
    failed task ended with (launcher/output/known_failures.py)."""
    return {"status": result.status, "reason": result.reason, "known_failure": known,
            "duration": round(result.duration, 3),
            "training": training_of(result), "evaluation": evaluation_of(result, closing),
            "status_rule": STATUS_RULE, **closing.to_dict(),
            "restarts": result.incidents, "lost": result.lost, "unwritten": result.unwritten,
            "waited": result.waited, "cut_short": result.cut_short,
            **({"preemption": result.preemption} if result.preemption is not None else {}),
            **({"save_request": result.save_request} if result.save_request is not None
               else {}),
            "tasks": [{k: v for k, v in r.items() if k != "status"} for r in rows]}


def closing_line(record: dict, status: int | None = None) -> str:
    """The closing line of a preempted run (``status``: a run stopped by a signal that
    saved first, ``launch cancel``, was cancelled, not preempted)."""
    saved, lost = record.get("step_saved"), record.get("steps_lost")
    where = f"checkpoint at step {saved}" if saved is not None else "no checkpoint"
    lost_words = f"{lost} step{'s' if lost != 1 else ''} lost" if lost is not None else \
        "steps lost unknown"
    reached = record.get("step_reached")
    at = f"at step {reached}" if reached is not None else "before any step was seen"
    how = "cancelled" if status is not None and status > 128 else "preempted"
    return (f"{how} {at}: {where} in model_dir ({lost_words}); the next launch of this "
            "spec resumes from it")
