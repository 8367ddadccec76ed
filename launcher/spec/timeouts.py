"""``timeouts``: every bound of a run, in seconds, declared once (launcher/spec/declared.py):
its schema, default and description make the JSON Schema, docs/spec.md's rows and the
parser. Read as attributes: ``plan.timeouts.kill``."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from launcher.spec.declared import Keyed, defaults, key, parse_section
from orchestrator import preemption

SECONDS = {"$ref": "#/$defs/seconds"}


@dataclass(frozen=True)
class Timeouts(Keyed):
    """The spec's ``timeouts``, each given or at its default."""

    start: float = key(SECONDS, "A task that cannot start in this time (remote checks, "
                                "allocation) fails.", 60.0)
    stall: float = key(SECONDS, "No new step or checkpoint for this long ends the job.", 300.0)
    finish: float = key(SECONDS, "After max_steps: time for trainers that no longer train to "
                                 "exit.", 30.0)
    save: float = key(SECONDS, "After max_steps: the longest trainers still at work (writing "
                               "model_dir, or synchronous trainers that all still run: a final "
                               "save, an export) are waited for, from the moment training was "
                               "done. Stopped then, they were cut short and the job fails.",
                      300.0)
    # TensorFlow's evaluator sleeps EvalSpec.throttle_secs (600 s by default) between two
    # evaluations, so the final one may come 600 s after the previous one, then takes its
    # own time; 900 s covers that (docs/ending.md).
    evaluator: float = key(SECONDS, "After the trainers ended: time for the evaluator to "
                                    "evaluate the final checkpoint.", 900.0)
    kill: float = key(SECONDS, "SIGTERM to SIGKILL.", 5.0)
    poll: float = key({"type": "number", "exclusiveMinimum": 0}, "How often the coordinator "
                      "looks at model_dir.", 1.0)
    job: float = key(SECONDS, "The whole job's deadline in seconds (0: none): when it passes, "
                              "every task is stopped and the job fails with that reason.", 0.0)
    unresponsive: float = key(SECONDS, "A task whose TensorFlow server answered gRPC once and "
                                       "then not for this many seconds is lost and goes "
                                       "through its restart policy (0: no gRPC checks).", 30.0)
    # the tasks' side (orchestrator/preemption.py) falls back to the same default
    preempt: float = key(SECONDS, "SIGTERM to the launcher (a preemption notice): the chief "
                                  "saves a checkpoint at its current step while every ps "
                                  "serves, and the launcher waits at most this many seconds "
                                  "for it to be complete in model_dir before it stops the "
                                  "tasks (0: stop at once, as Ctrl-C). Default 60.",
                         preemption.GRACE)


TIMEOUT_DEFAULTS: dict[str, float] = defaults(Timeouts)


def parse_timeouts(raw: Any, where: str = "timeouts") -> Timeouts:
    return parse_section(Timeouts, raw, where)
