"""How a job ends once training is done: who is stopped when, as a pure function.

The job loop calls ``end_step`` on every turn after training was seen done (a complete
checkpoint at or past max_steps, or the primary task exiting 0) with a snapshot of the
tasks and of model_dir; it stops what the answer names and ends the job when it says
``done``. The rules (docs/ending.md):

1. Trainers. In asynchronous training (a ps holds the variables) only the chief saves, so
   once it exited 0 a worker still running adds nothing to any checkpoint. An Estimator
   worker that trains ends at its next step, but a container or a Slurm step reports the
   exit late: it is stopped ``WORKER_GRACE`` s after the chief's exit. One still sleeping
   in Estimator's start delay (``start_delay``), and a ParameterServerStrategy worker (a
   server that never exits), are stopped one poll (``timeouts.poll``) after it.
   Once a complete checkpoint reached max_steps, trainers whose step is past it by more
   than asynchronous updates overshoot (``OVERSHOOT_PER_TRAINER`` steps per trainer: the
   script ignores max_steps) are stopped in the same turn; the others (a chief running a
   last evaluate, workers on their way out) get ``timeouts.finish`` from the moment
   max_steps was seen (in a checkpoint or the events file) to end by themselves: without
   a checkpoint at max_steps yet, that is also the time to write one. Synchronous
   trainers (MultiWorkerMirroredStrategy) finish together: while every one of them runs
   they are in the middle of common work (the end of ``fit``, a ``model.save`` every
   worker makes), so ``timeouts.finish`` counts only from the first one's end.
   Nothing is stopped in the middle of its work: after ``timeouts.finish``, trainers are
   waited for while model_dir is being written (a change seen within ``WRITE_QUIET`` s: a
   final save, an export) or, synchronous, while every one of them still runs, up to
   ``timeouts.save`` from the moment training was done (``EndStep.wait`` says so once).
   Trainers stopped at that bound while model_dir was still being written were cut short
   (``EndStep.cut``): the run cannot have succeeded.
2. Parameter servers never exit by themselves: stopped once no trainer runs or is about to
   be restarted.
3. The evaluator's window opens when the last trainer ended. Once it has evaluated the
   final checkpoint (max_steps when none was written) and is idle (its last line says it
   waits for the next checkpoint, as TensorFlow's evaluator does; or quiet for
   ``EVAL_QUIET`` s: an evaluation of the training data or a final export may follow), it
   is stopped: a script whose TrainSpec has no max_steps would loop for
   ever. Otherwise it gets ``timeouts.evaluator`` from the window's opening, a restart
   included. (TensorFlow's own evaluator exits by itself once it evaluated a checkpoint at
   or past its max_steps; ``target_step`` is what counts as evaluated at the end.)
4. The job is done when nothing runs and nothing is due to restart.

The end can also come from outside, before training is done: a preemption notice. SIGTERM
to ``launch`` (Slurm's warning signal, ``docker stop``, a node drain, ``launch
cancel``) while training runs, with ``timeouts.preempt`` > 0, stops the run in this order
(docs/preemption.md):

1. the tasks that save (``savers``: the chief or master, else worker 0; every trainer of
   MultiWorkerMirroredStrategy, where TensorFlow's PreemptionCheckpointHandler answers
   SIGTERM) get the notice (the backend's ``notice`` signal: SIGURG, which the in-task
   handler of orchestrator/preemption.py turns into a stop of the training session after
   its current step, so its CheckpointSaverHook saves), while every ps still serves;
2. the launcher waits until a checkpoint newer than the one at the notice, at or past the
   newest step known then, is complete in model_dir (every ps shard: the coordinator's
   reader), every saver ended, a saver said it has nothing to save or did not answer
   within ``ANSWER_WITHIN`` s, or ``timeouts.preempt`` passed (``over``);
3. then the ordered stop: trainers and the evaluator, the ps last.

The verdict is ``preempted``, exit status ``launcher.signals.PREEMPTED`` (75, EX_TEMPFAIL:
run it again, it resumes); ``launch cancel`` saves the same way and is ``cancelled``
(128+15). No restart budget is charged: the next ``launch`` of the spec (or Slurm's
requeue) resumes from the checkpoint.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any

from orchestrator.decisions import TaskState
from orchestrator.preemption import NOTHING_TO_SAVE
from orchestrator.roles import names_text, primary_task

if TYPE_CHECKING:
    from launcher.spec import Timeouts

TRAINERS = ("chief", "master", "worker")
EVAL_QUIET = 30.0         # s of silence after its final evaluation: the evaluator is idle
# The last line TensorFlow's evaluator prints when it waits for a new checkpoint.
IDLE_LINES = ("before starting next eval run", "No new checkpoint ready for evaluation")
EVALUATED_LINE = re.compile(r"Saving dict for global step (\d+)")
OVERSHOOT_PER_TRAINER = 3  # asynchronous updates past max_steps that are not "training on"
# s an Estimator worker that trains has after the chief's exit to end with it: it ends at
# its next step, but a container or a Slurm step reports the exit late.
WORKER_GRACE = 10.0
ESTIMATOR_DELAY_PER_WORKER = 5.0   # tf.estimator: worker i sleeps 5*(i+1) s before training,
ESTIMATOR_MAX_DELAY = 60.0         # at most 60 s (RunConfig.experimental_max_worker_delay_secs)
WRITE_QUIET = 10.0   # s without a change in model_dir: nothing is being written there


@dataclass
class JobResult:
    """How a job ended: the launcher's exit status and why, every task as it ended."""

    status: int                 # the launcher's exit status
    reason: str
    tasks: list[TaskState]      # every task as the job ended
    duration: float
    training_finished: bool = False   # training was seen done (max_steps, primary exit 0)
    incidents: list[dict] = field(default_factory=list)   # restarts, with what each restarted
    unwritten: list[str] = field(default_factory=list)    # what the run_dir did not get
    lost: list[dict] = field(default_factory=list)   # workers it went on without (elastic)
    waited: list[str] = field(default_factory=list)       # trainers waited for past finish
    cut_short: list[str] = field(default_factory=list)    # what was stopped mid-work, why
    preemption: dict | None = None    # a preemption notice carried out (launcher/ending.py)
    save_request: dict | None = None  # the save request at max_steps (Notice.to_dict)


@dataclass(frozen=True)
class TrainingView:
    """What model_dir says (the coordinator's last poll)."""

    max_steps: int | None = None
    reached_at: float | None = None   # when a complete checkpoint >= max_steps was seen
    latest_step: int | None = None    # the newest step known now (events or checkpoint)
    final_step: int | None = None     # the newest complete checkpoint's step
    evaluated_step: int | None = None  # the newest step the evaluator evaluated
    written_for: float | None = None   # s since model_dir last changed (None: not watched)
    written: str | None = None        # the file of model_dir that changed last
    # a save request at max_steps went unanswered: the trainers are waited for (their
    # own save or end) until a checkpoint covers max_steps, at most timeouts.save
    unsaved: bool = False
    # the savers that saved on that request: on their way out, not stopped as runaways
    saving: tuple[str, ...] = ()


@dataclass(frozen=True)
class EndStep:
    """Stop ``stop`` now (``reason`` says why); ``done``: every task ended, job over.
    ``wait``: trainers still at work past ``timeouts.finish`` are waited for (who, and
    what they do); ``cut``: what ``stop`` stops in the middle of its work."""

    stop: tuple[str, ...] = ()
    reason: str = ""
    done: bool = False
    wait: str = ""
    cut: str = ""


@dataclass(frozen=True)
class Moments:
    """A job's moments on the loop's clock: its start, when training was seen done
    (max_steps reached, or the primary task exited 0), when a monitor said max_steps was
    reached, and when the last trainer ended after that (the evaluator's window opens)."""

    started: float = 0.0
    training_done: float | None = None
    reached: float | None = None
    trainers_done: float | None = None


@dataclass(frozen=True)
class EndRules:
    """What the end rules know of the job itself: its timeouts, whether its trainers are
    synchronous (MultiWorkerMirroredStrategy) and whether its workers are tf.estimator's
    (they end by themselves)."""

    timeouts: Timeouts
    synchronous: bool = False
    estimator: bool = True


def end_step(now: float, moments: Moments, tasks: Iterable[TaskState],
             training: TrainingView, rules: EndRules) -> EndStep:
    """The next step of the end (see the module docstring). ``moments.training_done``
    (default now) and ``moments.trainers_done`` (None while a trainer runs) are read."""
    timeouts, synchronous, estimator = rules.timeouts, rules.synchronous, rules.estimator
    done_at, trainers_done_at = moments.training_done, moments.trainers_done
    tasks = list(tasks)
    running = [t for t in tasks if t.running]
    trainers = [t for t in running if t.type in TRAINERS]
    if trainers:
        since = training.reached_at if training.reached_at is not None else \
            done_at if done_at is not None else now
        return _trainers(now, since, tasks, trainers, training, timeouts, synchronous,
                         estimator)
    if any(t.restarting and t.type in TRAINERS for t in tasks):
        return EndStep()
    ps = [t for t in running if t.type == "ps"]
    if ps:
        return EndStep(_names(ps), "training ended: the parameter servers are no longer "
                                   "needed")
    return _evaluator(now, tasks, training, timeouts, trainers_done_at)


def _trainers(now: float, since: float, tasks: list[TaskState], trainers: list[TaskState],
              training: TrainingView, timeouts: Timeouts,
              synchronous: bool, estimator: bool) -> EndStep:
    """The trainers still running once training is done, in named steps: asynchronous
    workers after the primary's end, a script past max_steps, then timeouts.finish and
    timeouts.save."""
    step = _workers_after_primary(now, tasks, trainers, training, timeouts, synchronous,
                                  estimator) or _past_max_steps(tasks, trainers, training)
    if step is not None:
        return step
    together = synchronous and _all_run(tasks)
    start = _finish_from(since, tasks, synchronous, together)
    if now - (start if start is not None else since) < timeouts.finish:
        return EndStep()
    return _still_at_work(now, since, trainers, training, timeouts, together)


def _workers_after_primary(now: float, tasks: list[TaskState], trainers: list[TaskState],
                           training: TrainingView, timeouts: Timeouts,
                           synchronous: bool, estimator: bool) -> EndStep | None:
    """Asynchronous training: once the primary saved and exited 0, the other trainers add
    nothing to the model (Estimator's workers after a grace, unless still starting)."""
    primary = primary_task(tasks)
    asynchronous = not synchronous and any(t.type == "ps" for t in tasks)
    if not (asynchronous and primary is not None and not primary.running
            and primary.status == 0):
        return None
    after = now - (primary.ended_at if primary.ended_at is not None else now)
    poll = timeouts.poll
    workers = [t for t in trainers if t is not primary and after >= (
        max(WORKER_GRACE, poll) if estimator and not _in_start_delay(t, now) else poll)]
    if not workers:
        return None
    done = f"saved its final checkpoint (step {training.final_step}) and exited" \
        if training.final_step is not None else "exited 0 (no checkpoint in model_dir)"
    return EndStep(_names(workers), f"{primary.name} {done}: {_names_text(workers)} "
                                    f"add{'s' if len(workers) == 1 else ''} nothing "
                                    f"to the model after it")


def _past_max_steps(tasks: list[TaskState], trainers: list[TaskState],
                    training: TrainingView) -> EndStep | None:
    """A script that ignores max_steps: its steps still move past a saved final step."""
    saved = training.final_step is not None and training.max_steps is not None and \
        training.final_step >= training.max_steps
    trainers = [t for t in trainers if t.name not in training.saving]
    if saved and trainers and training.reached_at is not None and \
            _moving(training, len([t for t in tasks if t.type in TRAINERS])):
        return EndStep(_names(trainers), f"step {training.latest_step} is past max_steps "
                                         f"{training.max_steps} and still moving: the "
                                         f"script ignores max_steps")
    return None


def _finish_from(since: float, tasks: list[TaskState], synchronous: bool,
                 together: bool) -> float | None:
    """When timeouts.finish starts: at training's end; synchronous, at the first peer's
    end (None while every peer runs)."""
    if together:
        return None
    if not synchronous:
        return since
    ended = [t.ended_at for t in tasks if t.type in TRAINERS and not t.running and
             t.ended_at is not None]
    return max(since, min(ended)) if ended else since


def _still_at_work(now: float, since: float, trainers: list[TaskState],
                   training: TrainingView, timeouts: Timeouts,
                   together: bool) -> EndStep:
    """After timeouts.finish: stop the trainers, unless they still write model_dir or run
    together, which timeouts.save waits for (then they are cut short)."""
    bound = timeouts.save
    writing = training.written_for is not None and training.written_for < WRITE_QUIET
    own_save = training.unsaved and not _covered(training)
    if not (writing or together or own_save):
        return EndStep(_names(trainers), f"still running {timeouts.finish:g}s after "
                                         f"training was done (timeouts.finish)")
    if now - since < bound:
        return EndStep(wait=_waiting(trainers, training, writing))
    if not (writing or together):
        return EndStep(_names(trainers), f"no checkpoint at max_steps {training.max_steps} "
                                         f"within {bound:g}s after training was done "
                                         f"(timeouts.save): stopped unsaved")
    what = f"writing model_dir ({training.written} changed {training.written_for:.0f}s " \
        f"before)" if writing else "running together (synchronous: a save every worker " \
                                   "makes, the end of fit)"
    return EndStep(_names(trainers), f"still at work {bound:g}s after training was done "
                                     f"(timeouts.save)",
                   cut=f"{_names_text(trainers)}, stopped while still {what}")


def _all_run(tasks: list[TaskState]) -> bool:
    """Every trainer runs (none ended, none about to be restarted)."""
    return all(t.running for t in tasks if t.type in TRAINERS)


def _waiting(trainers: list[TaskState], training: TrainingView, writing: bool) -> str:
    what = f"model_dir is being written ({training.written})" if writing else \
        "the script's own save or end (it cannot save on request)" if training.unsaved \
        and not _covered(training) else \
        "synchronous trainers end together (a save every worker makes)"
    return f"{_names_text(trainers)}: {what}"


def _covered(training: TrainingView) -> bool:
    """A complete checkpoint at or past max_steps is in model_dir."""
    return training.final_step is not None and training.max_steps is not None and \
        training.final_step >= training.max_steps


def _evaluator(now: float, tasks: list[TaskState], training: TrainingView,
               timeouts: Timeouts, trainers_done_at: float | None) -> EndStep:
    evaluators = [t for t in tasks if t.type == "evaluator"]
    running = [t for t in evaluators if t.running]
    due = [t for t in evaluators if t.restarting]
    opened = trainers_done_at if trainers_done_at is not None else now
    window_over = now - opened >= timeouts.evaluator
    if running:
        # A running evaluator loops on: it will see the final checkpoint (TensorFlow's
        # own exits by itself once it evaluated one at or past its max_steps).
        target = training.final_step if training.final_step is not None else \
            training.max_steps
        evaluated = training.evaluated_step
        if target is not None and evaluated is not None and evaluated >= target and \
                all(idle(t) for t in running):
            return EndStep(_names(running), f"the final checkpoint (step {target}) was "
                                            f"evaluated (newest evaluation: step "
                                            f"{evaluated})")
        if window_over:
            return EndStep(_names(running), f"the evaluator did not evaluate the final "
                                            f"checkpoint within {timeouts.evaluator:g}s "
                                            f"(timeouts.evaluator)")
        return EndStep()
    if due and not window_over:
        return EndStep()
    return EndStep(done=True)


def evaluated_in(line: str) -> int | None:
    """The step of an evaluation a task's own output announces (Estimator.evaluate logs
    ``Saving dict for global step N: ...``), or None."""
    found = EVALUATED_LINE.search(line)
    return int(found.group(1)) if found else None


def own_evaluations(training: TrainingView, tasks: Iterable[TaskState]) -> TrainingView:
    """Who evaluated what. A chief that runs its own ``evaluate()`` (TonY's example) writes
    the same ``eval/`` events as the evaluator, so model_dir alone cannot tell whose an
    evaluation is: once a trainer announced an evaluation in its output, only the
    evaluator's own announcements count as the evaluator's (``TaskState.evaluated``: each
    task's newest announced step)."""
    tasks = list(tasks)
    if not any(t.evaluated is not None and t.type in TRAINERS for t in tasks):
        return training
    own = [t.evaluated for t in tasks if t.evaluated is not None and t.type == "evaluator"]
    return replace(training, evaluated_step=max(own) if own else None)


def idle(task: TaskState) -> bool:
    """Quiet for a while, or its last line says it waits for a checkpoint (a final export
    prints: it is neither)."""
    return task.quiet_for >= EVAL_QUIET or any(m in task.last_line for m in IDLE_LINES)


def target_step(training: TrainingView) -> int | None:
    """The step the evaluator must reach: max_steps, or the final checkpoint's step when
    training ended short of it (or max_steps is not known)."""
    steps = [s for s in (training.max_steps, training.final_step) if s is not None]
    return min(steps) if steps else None


def start_delay(task: TaskState) -> float:
    """How long tf.estimator keeps this worker asleep before it trains."""
    index = int(task.name.rsplit(":", 1)[1])
    return min(ESTIMATOR_MAX_DELAY, ESTIMATOR_DELAY_PER_WORKER * (index + 1))


def _in_start_delay(task: TaskState, now: float) -> bool:
    return task.type == "worker" and task.started_at is not None and \
        now - task.started_at < start_delay(task)


def _moving(training: TrainingView, trainers: int) -> bool:
    if training.latest_step is None or training.max_steps is None:
        return False
    return training.latest_step > training.max_steps + OVERSHOOT_PER_TRAINER * trainers


def _names(tasks: list[TaskState]) -> tuple[str, ...]:
    return tuple(t.name for t in tasks)


def _names_text(tasks: list[TaskState]) -> str:
    return names_text([t.name for t in tasks])


# ---------------------------------------------------------------------- a preemption notice
# s a saver has to answer a notice (its handler prints a line at once) or save: one that
# does neither has no handler (not Python, no sitecustomize; MultiWorkerMirroredStrategy
# trainers without PreemptionCheckpointHandler, whose TensorFlow swallows SIGTERM), and its
# checkpoint is not waited for. The SIGURG notice is sent again each RESEND s until it
# answers (one sent before the handler was armed, as the task started, is lost).
ANSWER_WITHIN = 10.0
RESEND = 1.0
# s model_dir is read on after the savers ended: one that saved and exited at once ends
# before the coordinator's next poll sees its checkpoint (every 0.1 s near max_steps,
# timeouts.poll = 1 s otherwise)
LOOK_AGAIN = 2.0


PREEMPTION = "preemption notice"   # the two triggers of one notice, as the console names them
AT_MAX_STEPS = "save request at max_steps"
END_GRACE = 10.0    # s a step at max_steps (not moving past it) is given to be saved: a script
# that stops there by itself (StopAtStepHook, fit's epochs) saves in that time, under load too


@dataclass
class Notice:
    """One notice being carried out: when it came, what model_dir held then, who got it.
    ``kind``: a preemption (SIGTERM to the launcher) or the save request at max_steps
    (the step reached max_steps and no checkpoint covers it); ``step``: the step its
    checkpoint must reach (the newest known at a preemption, max_steps at the end)."""

    at: float
    bound: float                    # timeouts.preempt
    notified: tuple[str, ...]       # the savers it was sent to
    step: int | None = None         # the newest step known at the notice
    saved: int | None = None        # the newest complete checkpoint's step then
    outcome: str = ""               # why the wait ended
    kind: str = PREEMPTION
    sends: int = 0                  # the signal it is sent as
    sent: float = -float("inf")     # when it was last sent
    answered: dict[str, str] = field(default_factory=dict)   # each saver's answer line
    seen: int | None = None         # the step that made it due (the end's request)
    source: str = ""                # ... and where that step was seen

    def to_dict(self) -> dict[str, Any]:
        if self.kind == AT_MAX_STEPS:
            return {"notified": list(self.notified), "step_seen": self.seen,
                    "seen_in": self.source, "checkpoint_at_request": self.saved,
                    "bound": self.bound, "outcome": self.outcome,
                    "answers": dict(self.answered), "saved": self.saved_it}
        return {"notified": list(self.notified), "step_at_notice": self.step,
                "checkpoint_at_notice": self.saved, "bound": self.bound,
                "outcome": self.outcome}

    @property
    def saved_it(self) -> bool:
        """Its checkpoint came (the wait ended on it)."""
        return self.outcome.startswith("checkpoint at step ")


def save_due(training: TrainingView, step: int | None, trainers: int,
             reached_for: float | None) -> bool:
    """Whether the savers get the save request at max_steps: the freshest step (``step``:
    the trainers' output or model_dir, whichever is newer) reached max_steps, no complete
    checkpoint covers it, and it moves on past max_steps (more than asynchronous updates
    overshoot: the script does not stop there) or stayed there ``END_GRACE`` s unsaved
    (``reached_for``: since when it is known; a script that stops at max_steps saves in
    that time by itself)."""
    if training.max_steps is None or step is None or step < training.max_steps or \
            _covered(training):
        return False
    moving = step > training.max_steps + OVERSHOOT_PER_TRAINER * max(1, trainers)
    return moving or (reached_for is not None and reached_for >= END_GRACE)


def savers(tasks: list[TaskState], synchronous: bool) -> list[str]:
    """The running tasks that save the job's checkpoints on a notice."""
    running = [t for t in tasks if t.running]
    if synchronous:
        return [t.name for t in running if t.type in TRAINERS]
    for name in ("chief:0", "master:0"):
        if any(t.name == name for t in tasks):
            return [name] if any(t.name == name for t in running) else []
    if any(t.type in ("chief", "master") for t in tasks):
        return []
    return [t.name for t in running if t.name == "worker:0"]


def over(notice: Notice, now: float, tasks: list[TaskState], training: TrainingView,
         answered: dict[str, str]) -> str | None:
    """Why the wait for the notice's checkpoint is over, or None while it goes on.
    ``answered``: each saver's answer so far (orchestrator/preemption.py's lines)."""
    final = training.final_step
    names = ", ".join(notice.notified)
    if final is not None and (notice.saved is None or final > notice.saved) and \
            (notice.step is None or final >= notice.step):
        return f"checkpoint at step {final} complete in model_dir"
    nothing = [n for n, line in answered.items() if NOTHING_TO_SAVE in line]
    if nothing and set(nothing) >= set(notice.notified):
        return f"nothing in {', '.join(nothing)} saves on a notice (no training session open)"
    if not any(t.running for t in tasks if t.name in notice.notified):
        return _ended_unsaved(notice, now, tasks)
    if not answered and now - notice.at >= min(ANSWER_WITHIN, notice.bound):
        return (f"{names} did not answer the notice within {ANSWER_WITHIN:g}s (no notice "
                "handler in it: docs/preemption.md)")
    if now - notice.at >= notice.bound:
        return f"no new checkpoint within {notice.bound:g}s (timeouts.preempt)"
    return None


def _ended_unsaved(notice: Notice, now: float, tasks: list[TaskState]) -> str | None:
    """Every saver ended: without a new checkpoint once model_dir was read on for
    LOOK_AGAIN s (a saver that saved and ended at once: its checkpoint is read next)."""
    ended = [t.ended_at for t in tasks if t.name in notice.notified and
             t.ended_at is not None]
    if ended and now - max(ended) < LOOK_AGAIN:
        return None
    return f"{', '.join(notice.notified)} ended without a new checkpoint"


def summary(reached: int | None, saved: int | None) -> dict:
    """What summary.json, state.json and ``launch status`` add to a notice's record: the
    step training reached, the step of the newest complete checkpoint, the steps lost."""
    lost = reached - saved if reached is not None and saved is not None else \
        reached if reached is not None else None
    return {"step_reached": reached, "step_saved": saved,
            "steps_lost": max(0, lost) if lost is not None else None}

