"""The progress line: what is happening, in one line the console prints every few seconds
while something changes.

- training: step / max_steps, the rate over a window of polls and the ETA (or "no new step
  for 45s" when none came for a while: old figures are never shown as current);
- restarting: which tasks are about to start again, no rate (a restart is no slow-down);
- finishing: training is done (max_steps reached, or the script's primary task exited 0)
  and the trainers still running are waited for;
- after training: waiting for the evaluator to evaluate the final checkpoint, why it may take
  a while (TensorFlow's ``start_delay_secs`` / ``throttle_secs``) and the bound
  (``timeouts.evaluator``); stopping the parameter servers;
- the step comes from the freshest source, which the line names when it is not model_dir's
  newest checkpoint: the events file, or the trainers' own output (launcher/output/
  trainer_steps.py: Estimator's ``step = N`` lines, Keras' bar, an estimate from
  ``global_step/sec``), with its age. "no new step" is said only when no source moved;
- a job that writes nothing into model_dir (no checkpoint, no summary: MultiWorkerMirrored
  custom loops, scripts that save elsewhere) and whose trainers print no step says so.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from launcher.output.trainer_steps import TrainerSteps
from orchestrator.coordinator import Progress
from orchestrator.roles import names_text

FIRST_METRICS = ("loss", "accuracy", "auc")   # shown first in the progress line
QUIET_AFTER = 10.0    # seconds without a new step before the line says so (no stale rate)
NOTHING_AFTER = 30.0  # s with nothing in model_dir before the line says where progress is
NOTHING = "no checkpoint or summary in model_dir yet after {waited}"
START_DELAY, THROTTLE = 120, 600   # TensorFlow's EvalSpec defaults (s)


@dataclass(frozen=True)
class JobState:
    """What the tasks are doing, for the progress line (the coordinator's adapter,
    launcher/monitors/coordinator.py, fills it)."""

    restarting: tuple[str, ...] = ()      # tasks whose restart is due
    finishing: str | None = None          # training is done (why) while trainers still run
    trainers: tuple[str, ...] = ()        # trainers running
    trainers_ended: bool = False          # every trainer ended: training is over
    evaluators: tuple[str, ...] = ()      # evaluators running
    ps: tuple[str, ...] = ()              # parameter servers running
    ended_for: float = 0.0                # s since the last trainer ended
    evaluator_timeout: float | None = None   # timeouts.evaluator


@dataclass(frozen=True)
class OutputProgress:
    """The trainers' own word on their step, when it is ahead of model_dir's."""

    step: int
    task: str
    age: float                   # s since the line that showed it
    estimated: bool = False      # steps since model_dir's step, from global_step/sec
    rate: float | None = None    # the steps/s the trainer reported
    quiet_after: float = 10.0    # s after which its age means no new step came

    def source(self) -> str:
        if self.estimated:
            return (f"estimated from {self.task}'s global_step/sec "
                    f"{duration_text(self.age)} ago")
        return f"from {self.task}'s output {duration_text(self.age)} ago"


def output_progress(steps: TrainerSteps | None, p: Progress, now: float, since: float
                    ) -> OutputProgress | None:
    """What the trainers' output says when it is ahead of model_dir (``since``: when the
    job started, the base of an estimate when model_dir has no step yet)."""
    if steps is None:
        return None
    known = p.latest_step
    known_at = p.step_at if p.step_at is not None and known is not None else since
    quiet = steps.quiet_after(QUIET_AFTER)
    newest, shown = steps.newest(), None
    if newest is not None and (known is None or newest.step > known and
                               newest.at >= known_at):      # the fresher source wins
        known, known_at = newest.step, newest.at
        shown = OutputProgress(newest.step, newest.task, now - newest.at, quiet_after=quiet)
    rate = steps.rate()         # steps since the newest known one, from global_step/sec
    estimate = steps.estimate(known_at) if rate is not None and rate[2] > known_at else None
    if rate is None or estimate is None or estimate[0] <= 0:
        return shown
    return OutputProgress((known or 0) + estimate[0], estimate[1], now - rate[2],
                          estimated=True, rate=rate[1], quiet_after=quiet)


def duration_text(secs: float) -> str:
    """Seconds as "45s", "3m07s" or "2h05m"."""
    secs = int(round(secs))
    if secs < 60:
        return f"{secs}s"
    if secs < 3600:
        return f"{secs // 60}m{secs % 60:02d}s"
    return f"{secs // 3600}h{secs % 3600 // 60:02d}m"


def eval_text(ev: dict) -> str:
    """The latest evaluation in a few words: 'eval at step 200: loss=0.52, accuracy=0.73'."""
    shown = sorted(ev.get("metrics", {}).items(),
                   key=lambda kv: (FIRST_METRICS.index(kv[0])
                                   if kv[0] in FIRST_METRICS else len(FIRST_METRICS), kv[0]))
    metrics = ", ".join(f"{k}={v:.4g}" if isinstance(v, (int, float)) else f"{k}={v}"
                        for k, v in shown[:4])
    return f"eval at step {ev.get('step')}: {metrics}"


def progress_fields(p: Progress, output: OutputProgress | None = None,
                    now: float | None = None) -> dict[str, Any]:
    """The progress as plain data (state.json's ``progress``, `launch status --json`): the
    newest complete checkpoint's step, the newest step known and where it comes from
    (``model_dir``, or a trainer's own output when that is ahead: ``output``), steps per
    second, the ETA in seconds, the newest evaluation (its step and metrics) and the
    newest evaluated step. ``step_age``: seconds since the newest step was first seen
    (``now``: the clock of ``Progress.step_at``), when known."""
    ev = p.latest_eval if isinstance(p.latest_eval, dict) else None
    evaluation = {"step": ev.get("step"), "metrics": ev.get("metrics") or {}} if ev else None
    latest, source, rate = p.latest_step, "model_dir", p.steps_per_sec
    age = now - p.step_at if now is not None and p.step_at is not None else None
    if output is not None and (latest is None or output.step > latest):
        latest, source = output.step, f"{output.task}'s output"
        rate = output.rate if output.rate is not None else rate
        age = output.age
    eta = p.eta_secs
    if latest is not None and p.max_steps is not None and rate:
        eta = max(0.0, p.max_steps - latest) / rate
    return {"step": p.step, "latest_step": latest,
            "step_source": source if latest is not None else None,
            "step_age": round(max(0.0, age), 1) if latest is not None and age is not None
            else None,
            "rate": round(rate, 3) if rate is not None else None,
            "eta": round(eta, 1) if eta is not None else None,
            "evaluation": evaluation, "evaluated_step": p.evaluated_step}


def rate_words(p: Progress, now: float | None, moving_at: float | None = None) -> list[str]:
    """The rate and ETA ("66.2 steps/s", "ETA 7s"), or, when no new step came for
    QUIET_AFTER s before ``now`` (a monotonic time), "no new step for 45s" instead: old
    figures are never shown as current. ``moving_at``: when a trainer's output last showed
    a step or a rate, while that counts as moving (TrainerSteps.moving): then no rate from
    model_dir, and no "no new step"."""
    quiet = None if now is None or p.step_at is None else now - p.step_at
    if quiet is not None and quiet >= QUIET_AFTER and not p.reached_max_steps:
        if moving_at is not None and now is not None:
            return [f"steps moving in the trainers' output {duration_text(now - moving_at)} "
                    f"ago, none new in model_dir for {duration_text(quiet)}"]
        return [f"no new step for {duration_text(quiet)}"]
    words = []
    if p.steps_per_sec is not None:
        words.append(f"{p.steps_per_sec:.1f} steps/s")
    if p.eta_secs is not None and not p.reached_max_steps:
        words.append(f"ETA {duration_text(p.eta_secs)}")
    return words


def state_words(p: Progress, state: JobState) -> list[str] | None:
    """What happens instead of training (None: training): restarting, finishing, the
    evaluator's wait, the ps being stopped."""
    if state.restarting:
        return [f"restarting {names_text(state.restarting)}"]
    if state.finishing and state.trainers:
        return [f"finishing ({state.finishing}): waiting for {names_text(state.trainers)} "
                f"to end"]
    if not state.trainers_ended:
        return None
    if state.evaluators:
        return [f"training ended; {evaluator_words(p, state)}"]
    if state.ps:
        return ["training ended; stopping the parameter servers"]
    return ["training ended"]


def evaluator_words(p: Progress, state: JobState) -> str:
    """Why the evaluator is waited for, and for how long at most."""
    who = names_text(state.evaluators)
    target = p.step
    if target is not None and p.evaluated_step is not None and p.evaluated_step >= target:
        return f"the final checkpoint (step {target}) was evaluated; waiting for {who} to end"
    what = f"the final checkpoint (step {target})" if target is not None else \
        "the final checkpoint"
    if p.evaluated_step is None:
        why = (f"TensorFlow's evaluator waits EvalSpec.start_delay_secs ({START_DELAY}s by "
               f"default) before its first evaluation")
    else:
        why = (f"its last evaluation was at step {p.evaluated_step}; TensorFlow's evaluator "
               f"waits EvalSpec.throttle_secs ({THROTTLE}s by default) between two")
    words = f"waiting for {who} to evaluate {what}: {why}"
    if state.evaluator_timeout is not None:
        left = max(0.0, state.evaluator_timeout - state.ended_for)
        words += (f"; at most {duration_text(left)} more (timeouts.evaluator "
                  f"{state.evaluator_timeout:g}s)")
    return words


def step_text(step: int, max_steps: int | None, estimated: bool = False) -> str:
    """'step 400/602 (66%)', '~' before an estimated step."""
    total = f"/{max_steps} ({100 * min(step, max_steps) // max_steps}%)" if max_steps else ""
    return f"step {'~' if estimated else ''}{step}{total}"


def output_words(output: OutputProgress) -> list[str]:
    """Where an output step comes from, how old it is, the rate a trainer reported."""
    if output.age >= output.quiet_after:
        return [f"no new step for {duration_text(output.age)} ({output.task}'s output)"]
    words = [output.source()]
    if output.rate is not None:
        words.append(f"{output.rate:.1f} steps/s")
    return words


def progress_line(p: Progress, waited: float, restarts: int = 0, now: float | None = None,
                  silent: list[str] | tuple[str, ...] = (),
                  state: JobState | None = None, output: OutputProgress | None = None,
                  moving_at: float | None = None, nothing: str = NOTHING) -> str:
    """One line: where training stands (the step from the events file when it is ahead of
    the newest complete checkpoint, from the trainers' own output, ``output``, when that is
    ahead of both), what is happening (``state``: see the module docstring), and how many
    restarts it took so far. ``silent`` names tasks that stopped answering gRPC;
    ``moving_at``: when a trainer's output last showed a step or a rate; ``nothing``: what
    to say when model_dir holds nothing yet ({waited}: for how long)."""
    state = state or JobState()
    step = p.latest_step
    happening = state_words(p, state)
    if output is not None and not state.restarting and not state.trainers_ended and \
            (step is None or output.step > step):
        line = _output_step(p, output, happening)
    elif step is None:
        line = _no_step(p, waited, happening, nothing)
    else:
        line = _model_dir_step(p, step, happening if happening is not None
                               else rate_words(p, now, moving_at))
    return f"progress: {line}{_tail(p, silent, restarts)}"


def _output_step(p: Progress, output: OutputProgress, happening: list[str] | None) -> str:
    """The step a trainer's output shows, ahead of model_dir."""
    words = happening if happening is not None else output_words(output)
    line = ", ".join([step_text(output.step, p.max_steps, output.estimated), *words])
    return line + (f", checkpoint {p.checkpoint.name}" if p.checkpoint
                   else ", no checkpoint in model_dir yet")


def _no_step(p: Progress, waited: float, happening: list[str] | None, nothing: str) -> str:
    """No step known yet: a checkpoint without one, what happens, or the wait."""
    if p.checkpoint:
        return ", ".join([f"checkpoint {p.checkpoint.progress}", *(happening or [])])
    if happening:
        return happening[0]
    if waited >= NOTHING_AFTER and p.events_step is None:
        return nothing.format(waited=duration_text(waited))
    return "waiting for the first checkpoint"


def _model_dir_step(p: Progress, step: int, words: list[str]) -> str:
    """The step model_dir shows: its newest complete checkpoint's, or the events file's
    when that is ahead (and says so)."""
    ckpt = p.checkpoint
    source = " in the events file" if ckpt is not None and ckpt.step is not None and \
        step > ckpt.step else ""
    line = ", ".join([step_text(step, p.max_steps) + source, *words])
    return line + (f", checkpoint {ckpt.name}" if ckpt else ", no complete checkpoint yet")


def _tail(p: Progress, silent: list[str] | tuple[str, ...], restarts: int) -> str:
    """After the step: the newest evaluation, the tasks not answering, the restarts so
    far, a model_dir that cannot be read now."""
    tail = f"; {eval_text(p.latest_eval)}" if p.latest_eval else ""
    if silent:
        tail += f"; {', '.join(silent)} not answering"
    if restarts:
        tail += f"; {restarts} restart{'s' if restarts > 1 else ''}"
    if p.last_error:
        tail += f" [model_dir not readable: {p.last_error}]"
    return tail
