"""Default restart rules per role, following how TensorFlow survives a lost task.

Plain data, no launcher import. The launcher (launcher/restarts.py) applies them; a spec's
``restart`` section overrides policy, max_restarts and backoff per role, never the scope,
which is TensorFlow's rule, not a preference:

- worker (Estimator or ParameterServerStrategy): a lost worker is restarted alone; an
  Estimator worker rejoins the running session, a PSS coordinator carries on without it
  and takes it back when it listens again.
- ps: the variables live there, so a lost ps means the whole cluster restarts and every
  task restores from the newest complete checkpoint in model_dir (Estimator and the
  PSS/Keras checkpoint managers restore on start).
- chief (or master): only the chief writes checkpoints. It is restarted alone and
  restores the newest complete checkpoint into the ps on start, so at most one checkpoint
  interval is lost and the workers keep running.
- evaluator: outside the cluster, restarted alone; it picks up the newest checkpoint.
- no ps at all (MultiWorkerMirroredStrategy, synchronous): every trainer takes part in
  every all-reduce, so losing any trainer restarts the whole cluster.
"""

from __future__ import annotations

from dataclasses import dataclass

from orchestrator.decisions import CLUSTER, TASK
from orchestrator.roles import TRAINERS

NEVER, ON_FAILURE, ALWAYS = "never", "on-failure", "always"
__all__ = ["CLUSTER", "TASK", "NEVER", "ON_FAILURE", "ALWAYS", "DEFAULTS", "scope_for",
           "backoff_delay", "TRANSIENT_ERRORS", "RoleDefaults", "MAX_BACKOFF"]


@dataclass(frozen=True)
class RoleDefaults:
    policy: str
    max_restarts: int
    backoff: float      # seconds before the first restart; doubled for each next one
    scope: str          # TASK or CLUSTER


DEFAULTS: dict[str, RoleDefaults] = {
    "chief": RoleDefaults(ON_FAILURE, 3, 1.0, TASK),
    "master": RoleDefaults(ON_FAILURE, 3, 1.0, TASK),
    "worker": RoleDefaults(ON_FAILURE, 3, 1.0, TASK),
    "ps": RoleDefaults(ON_FAILURE, 3, 1.0, CLUSTER),
    "evaluator": RoleDefaults(ON_FAILURE, 3, 1.0, TASK),
}
MAX_BACKOFF = 60.0

# An error exit whose output names one of these was caused by a peer (a ps or worker that
# went away), not by the user's code: it is retried like a kill.
TRANSIENT_ERRORS = (
    "UnavailableError", "AbortedError", "DeadlineExceededError", "CancelledError",
    "Socket closed", "Connection reset by peer", "failed to connect to all addresses",
    "ssh: connect to host",     # the task's host did not answer ssh (down, cut off)
)


# An evaluator that reads a checkpoint the chief deletes under it (keep_checkpoint_max: the
# default keeps 5) fails with one of these; the next checkpoint is there, so it is retried.
VANISHED_CHECKPOINT = (
    "Failed to find any matching files for",          # NotFoundError (restore, TF 2.15)
    "The passed save_path is not a valid checkpoint",  # ValueError (Saver.restore)
    "Unsuccessful TensorSliceReader constructor",
)
VANISHED_ROLES = ("evaluator",)


def scope_for(role: str, synchronous: bool) -> str:
    """TASK or CLUSTER: what must restart when a task of ``role`` is lost. ``synchronous``:
    no ps and several trainers (every trainer is in every all-reduce)."""
    if synchronous and role in TRAINERS:
        return CLUSTER
    return DEFAULTS[role].scope


def backoff_delay(base: float, attempt: int) -> float:
    """Seconds to wait before restart number ``attempt`` (1, 2, ...): base, 2·base, 4·base..."""
    return min(MAX_BACKOFF, base * (2 ** max(0, attempt - 1)))
