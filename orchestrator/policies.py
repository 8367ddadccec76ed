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

from orchestrator.decisions import CLUSTER, TASK, Scope
from orchestrator.roles import TRAINERS

NEVER, ON_FAILURE, ALWAYS = "never", "on-failure", "always"
POLICIES = (NEVER, ON_FAILURE, ALWAYS)
__all__ = ["CLUSTER", "TASK", "NEVER", "ON_FAILURE", "ALWAYS", "POLICIES", "DEFAULTS",
           "SCOPES", "scope_for", "policy_of", "backoff_delay", "TRANSIENT_ERRORS",
           "RestartPolicy", "MAX_BACKOFF"]


@dataclass(frozen=True)
class RestartPolicy:
    """A role's restart rule: the default below, or the spec's ``restart`` section."""

    policy: str = NEVER         # NEVER, ON_FAILURE or ALWAYS
    max_restarts: int = 0
    backoff: float = 1.0        # seconds before the first restart; doubled for each next one


DEFAULTS: dict[str, RestartPolicy] = {
    role: RestartPolicy(ON_FAILURE, 3, 1.0)
    for role in ("chief", "master", "worker", "ps", "evaluator")}
# What restarts when a task of the role is lost: TensorFlow's rule, not a preference.
SCOPES: dict[str, Scope] = {"chief": TASK, "master": TASK, "worker": TASK, "ps": CLUSTER,
                          "evaluator": TASK}
MAX_BACKOFF = 60.0

# An error exit whose output names one of these was caused by a peer (a ps or worker that
# went away), not by the user's code: it is retried like a kill.
TRANSIENT_ERRORS = (
    "UnavailableError", "AbortedError", "DeadlineExceededError", "CancelledError",
    "Socket closed", "Connection reset by peer", "failed to connect to all addresses",
    "ssh: connect to host",     # the task's host did not answer ssh (down, cut off)
)
# The last line of a task whose host stopped answering ssh under it (its keepalive timed
# out: launcher/backends/ssh.py): a loss, retried like a kill.
HOST_LOST = "tfcluster: lost the ssh connection to "


# An evaluator that reads a checkpoint the chief deletes under it (keep_checkpoint_max: the
# default keeps 5) fails with one of these; the next checkpoint is there, so it is retried.
VANISHED_CHECKPOINT = (
    "Failed to find any matching files for",          # NotFoundError (restore, TF 2.15)
    "The passed save_path is not a valid checkpoint",  # ValueError (Saver.restore)
    "Unsuccessful TensorSliceReader constructor",
)
VANISHED_ROLES = ("evaluator",)


def scope_for(role: str, synchronous: bool) -> Scope:
    """TASK or CLUSTER: what must restart when a task of ``role`` is lost. ``synchronous``:
    no ps and several trainers (every trainer is in every all-reduce)."""
    if synchronous and role in TRAINERS:
        return CLUSTER
    return SCOPES[role]


def policy_of(role: str, given: dict[str, RestartPolicy]) -> RestartPolicy:
    """The spec's policy for ``role`` (``given``), else the default."""
    return given.get(role, DEFAULTS[role])


def backoff_delay(base: float, attempt: int) -> float:
    """Seconds to wait before restart number ``attempt`` (1, 2, ...): base, 2·base, 4·base..."""
    return min(MAX_BACKOFF, base * (2 ** max(0, attempt - 1)))
