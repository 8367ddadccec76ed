"""Restart or fail: the one place that decides what a lost task means for the job.

An exit is classified first:
- ``ok``: exit status 0;
- ``signal``: killed by a signal (negative status, or 128+N from a shell or wrapper), e.g.
  kill -9, the OOM killer, a preempted host;
- ``transient``: an error exit whose output names an error caused by a peer going away
  (UnavailableError, "Socket closed"...: orchestrator.policies.TRANSIENT_ERRORS);
- ``error``: any other non-zero exit, typically a Python traceback from the user's code.

Then the role's policy (the spec's ``restart`` section, else orchestrator.policies.DEFAULTS):
- ``never``: any failure fails the job;
- ``on-failure``: a ``signal`` or ``transient`` exit is restarted; an ``error`` is not
  retried (the same code would fail the same way) and fails the job;
- ``always``: every failure, ``error`` included, is restarted, and so is a ps that exits 0
  before training ended.
``max_restarts`` bounds the restarts caused by one task; once spent, the next failure of
that task fails the job ("restart budget spent"), except for a worker whose role declares a
minimum (``roles.worker.minimum``, asynchronous training only): while that many workers are
left without it, the worker is dropped (``drop``) and the job goes on (docs/reliability.md,
"Elastic workers"). Restart n waits ``backoff·2^(n-1)`` s
(at most 60). The scope (the task alone, or every task) is TensorFlow's rule for the role
(orchestrator.policies.scope_for): a lost ps restarts the whole cluster, which restores
from the newest complete checkpoint in model_dir.
"""

from __future__ import annotations

import signal
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Final, Literal

from orchestrator.decisions import CLUSTER, DROP, FAIL, IGNORE, RESTART, Decision
from orchestrator.policies import (
    ALWAYS,
    HOST_LOST,
    NEVER,
    TRANSIENT_ERRORS,
    VANISHED_CHECKPOINT,
    VANISHED_ROLES,
    RestartPolicy,
    backoff_delay,
    policy_of,
    scope_for,
)
from orchestrator.roles import TRAINERS

# What an ended or lost task's end was, as the policies read it (the module docstring).
ExitKind = Literal["ok", "signal", "transient", "error", "lost", "refused"]
OK: Final = "ok"
SIGNAL: Final = "signal"
TRANSIENT: Final = "transient"
ERROR: Final = "error"
LOST: Final = "lost"
REFUSED: Final = "refused"     # its command could not be started (a shell, the engine)


def signal_name(signum: int) -> str:
    try:
        return signal.Signals(signum).name
    except ValueError:
        return f"signal {signum}"


def classify_exit(status: int, tail: Iterable[str] = (), role: str | None = None
                  ) -> tuple[ExitKind, str]:
    """(kind, description) of an exit status and the task's last output lines (with the
    exception line of its log, launcher/output/tracebacks.py, when it is further up)."""
    if status == 0:
        return OK, "exited 0"
    if status < 0:
        return SIGNAL, f"was killed by {signal_name(-status)}"
    if 128 < status <= 128 + 64:
        return SIGNAL, f"was killed by {signal_name(status - 128)} (exit status {status})"
    lines = list(tail)
    for line in reversed(lines):
        if line.startswith(HOST_LOST):
            return TRANSIENT, line[len("tfcluster: "):]
    if role in VANISHED_ROLES:
        for line in reversed(lines):
            if any(marker in line for marker in VANISHED_CHECKPOINT):
                return TRANSIENT, (f"failed with exit status {status} (the checkpoint it read "
                                   f"was deleted under it: keep_checkpoint_max)")
    for line in reversed(lines):
        for marker in TRANSIENT_ERRORS:
            if marker in line:
                return TRANSIENT, f"failed with exit status {status} ({marker}: a peer went away)"
    return ERROR, f"failed with exit status {status}"


@dataclass
class RestartBook:
    """Applies the policies and counts the restarts each task caused."""

    overrides: dict[str, RestartPolicy] = field(default_factory=dict)   # the spec's
    synchronous: bool = False
    caused: dict[str, int] = field(default_factory=dict)
    minimum: dict[str, int] = field(default_factory=dict)   # role -> fewest tasks left
    counts: dict[str, int] = field(default_factory=dict)    # role -> tasks in the plan
    primary: str = ""           # the task whose exit ends training: never dropped
    dropped: set[str] = field(default_factory=set)   # tasks the job goes on without

    def policy_for(self, role: str) -> RestartPolicy:
        return policy_of(role, self.overrides)

    def judge_exit(self, role: str, name: str, status: int, tail: Iterable[str],
                   finishing: bool) -> Decision:
        """What an exit the launcher did not ask for means."""
        kind, what = classify_exit(status, tail, role)
        if kind == OK:
            if role == "ps" and not finishing:
                if self.policy_for(role).policy == ALWAYS:
                    return self._restart(role, name, f"{name} exited before training ended")
                return Decision(FAIL, f"{name} exited before training ended")
            return Decision(IGNORE, f"{name} {what}")
        if finishing:
            if role in TRAINERS and kind == SIGNAL:
                return Decision(IGNORE, f"{name} {what} after training ended")
            if role == "ps":
                return Decision(IGNORE, f"{name} {what} after training ended")
            if role != "evaluator":
                return Decision(FAIL, f"{name} {what}")
        return self._decide(role, name, kind, f"{name} {what}")

    def judge_refused(self, role: str, name: str, line: str) -> Decision:
        """A restart whose command was refused (``line`` says why): as for a task that
        died of an error; only ``always`` retries it."""
        return self._decide(role, name, REFUSED, line)

    def judge_lost(self, role: str, name: str, reason: str) -> Decision:
        """A monitor found the task lost (unreachable, hung) while the launcher saw no exit."""
        return self._decide(role, name, LOST, reason)

    def _decide(self, role: str, name: str, kind: ExitKind, what: str) -> Decision:
        if name in self.dropped:    # a late word about a worker the job went on without
            return Decision(IGNORE, f"{what} (the job already goes on without {name})")
        policy = self.policy_for(role)
        if policy.policy == NEVER:
            return Decision(FAIL, f"{what}; restart policy of {role} is never")
        if kind == ERROR and policy.policy != ALWAYS:
            return Decision(FAIL, f"{what}; not retried: an error in the task's own code "
                                   f"would repeat (restart policy 'always' retries it)")
        if kind == REFUSED and policy.policy != ALWAYS:
            return Decision(FAIL, f"{what}; not retried: the same command would be refused "
                                   f"again (restart policy 'always' retries it)")
        return self._restart(role, name, what)

    def _restart(self, role: str, name: str, what: str) -> Decision:
        policy = self.policy_for(role)
        done = self.caused.get(name, 0)
        if done >= policy.max_restarts:
            return self._without(role, name, f"{what}; restart budget spent ({done} of "
                                             f"{policy.max_restarts} restarts of {name} used)")
        attempt = done + 1
        self.caused[name] = attempt
        scope = scope_for(role, self.synchronous)
        delay = backoff_delay(policy.backoff, attempt)
        target = ("restarting the whole cluster from the newest checkpoint" if scope == CLUSTER
                  else f"restarting {name}")
        return Decision(RESTART, f"{what}; {target} in {delay:g}s "
                                  f"(restart {attempt} of {policy.max_restarts})",
                       (name,), scope, delay, attempt)

    def _without(self, role: str, name: str, spent: str) -> Decision:
        """A task that cannot come back: dropped while its role's minimum holds without it,
        else the job fails."""
        if role not in self.minimum or name == self.primary:
            return Decision(FAIL, spent)
        minimum, count = self.minimum[role], self.counts[role]
        left = count - len([n for n in self.dropped if n.startswith(f"{role}:")]) - 1
        if left < minimum:
            return Decision(FAIL, f"{spent}; {left} of {count} {role}s would be left, fewer "
                                  f"than roles.{role}.minimum {minimum}")
        self.dropped.add(name)
        return Decision(DROP, f"{spent}; going on with {left} of {count} {role}s "
                              f"(roles.{role}.minimum {minimum})", (name,))

    def back(self, name: str) -> None:
        """A dropped task was started again (its host answers again)."""
        self.dropped.discard(name)
