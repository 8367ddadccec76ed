"""Elastic workers: a job of asynchronous training goes on without a worker that cannot
come back, while its role's minimum holds (``roles.worker.minimum``; docs/reliability.md).

Plain data and one watcher, no launcher import. The judge is launcher/restarts.py
(``drop``: its restarts are spent and enough workers are left); the job loop
(launcher/job.py) records the loss here and carries on:
- the console names the lost worker and the data shard it read (TFCLUSTER_SHARD_INDEX of
  TFCLUSTER_NUM_SHARDS, orchestrator.sharding), which no one reads from then on: the
  helpers do not re-shard, the remaining workers keep their own shards;
- its host is asked (``Backend.probe``, a ``true`` where the task would run, off the job
  loop's thread) every ``RETURN_PERIOD`` s. A host that did not answer once the worker was
  lost and answers again has returned: the worker is started again. A host that answers
  from the first question is there (the worker itself could not keep running): it is not
  asked again and the worker stays lost. The local backend's host is this machine, which
  always answers: there, a lost worker stays lost;
- the job ends as it would with every worker, and its verdict says how many fewer.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import Generic, Protocol, TypeVar

from orchestrator.sharding import INDEX_VAR, current_shard

RETURN_PERIOD = 15.0    # s between two questions to a lost worker's host
PROBE_TIMEOUT = 10.0    # s one question may take (the caller's probe)
HERE, GONE, RETURNED = "here", "gone", "returned"
ASKING = "host-of-"     # the names of the threads that ask


class Task(Protocol):
    """What is read of a task here (launcher.plan.TaskPlan has it)."""

    @property
    def name(self) -> str: ...
    host: str
    env: dict[str, str]


T = TypeVar("T", bound=Task)


@dataclass
class Lost:
    """A worker the job went on without (summary.json's ``lost``)."""

    task: str
    reason: str
    at: float                       # s after the job's start
    shard: tuple[int, int] | None   # (index, count) of the data it read; None: not a reader
    host: str = ""
    returned_at: float | None = None    # s after the job's start, when started again

    def to_dict(self) -> dict:
        return {"task": self.task, "reason": self.reason, "at": round(self.at, 3),
                "shard": list(self.shard) if self.shard else None, "host": self.host,
                "returned_at": None if self.returned_at is None else
                round(self.returned_at, 3)}


def lost_of(task: Task, reason: str, at: float) -> Lost:
    """The record of ``task`` lost for good ``at`` s into the job."""
    shard = None
    if INDEX_VAR in task.env:
        try:
            found = current_shard(task.env)
            shard = (found.index, found.count)
        except ValueError:
            pass
    return Lost(task.name, reason, at, shard, task.host)


def lost_line(lost: Lost) -> str:
    """The console's line when the job goes on without a worker (``reason`` names it)."""
    line = lost.reason
    if lost.shard is not None:
        index, count = lost.shard
        line += (f"; shard {index} of {count} of the training data (its "
                 f"{INDEX_VAR}) is read by no one now")
    return line


def fewer_words(lost: list[Lost]) -> str:
    """'1 worker fewer (worker:1 lost for good)', for the verdict; '' when none is."""
    gone = [entry.task for entry in lost if entry.returned_at is None]
    if not gone:
        return ""
    n = len(gone)
    return f"{n} worker{'s' if n > 1 else ''} fewer ({', '.join(gone)} lost for good)"


class HostWatch(Generic[T]):
    """Asks the hosts of lost workers whether they answer, one question per worker at a
    time, on threads of its own; ``returned`` (called by the job loop on each turn) names
    the workers whose host is back."""

    def __init__(self, probe: Callable[[T], bool], clock: Callable[[], float],
                 say: Callable[[str], None], period: float = RETURN_PERIOD):
        self.probe = probe
        self.clock = clock
        self.say = say
        self.period = period
        self._state: dict[str, str] = {}          # task -> HERE (first answer), GONE, RETURNED
        self._asking: dict[str, threading.Thread] = {}
        self._answers: dict[str, bool] = {}
        self._next: dict[str, float] = {}
        self._tasks: dict[str, T] = {}
        self._lock = threading.Lock()

    def watch(self, task: T) -> None:
        self._tasks[task.name] = task
        self._state.pop(task.name, None)
        self._next[task.name] = self.clock()

    def returned(self) -> list[str]:
        """The workers whose host answered again (each named once; no longer watched)."""
        back = []
        for name in list(self._tasks):
            with self._lock:
                answer = self._answers.pop(name, None)
            if answer is not None:
                self._asking.pop(name, None)
                first = name not in self._state
                if answer and first:
                    self._state[name] = HERE        # the host is there: nothing to wait for
                elif answer:
                    self._state[name] = RETURNED
                    back.append(name)
                else:
                    if self._state.get(name) != GONE:
                        task = self._tasks[name]
                        self.say(f"{name}'s host {task.host} does not answer: {name} is "
                                 f"started again once it does")
                    self._state[name] = GONE
                    self._next[name] = self.clock() + self.period
            state = self._state.get(name)
            if state in (HERE, RETURNED):
                del self._tasks[name]
                continue
            if name not in self._asking and self.clock() >= self._next[name]:
                self._ask(self._tasks[name])
        return back

    def _ask(self, task: T) -> None:
        def ask() -> None:
            try:
                answer = self.probe(task)
            except Exception:   # noqa: BLE001 - a probe that breaks is a host that is not there
                answer = False
            with self._lock:
                self._answers[task.name] = answer
        thread = threading.Thread(target=ask, name=f"{ASKING}{task.name}", daemon=True)
        self._asking[task.name] = thread
        thread.start()
