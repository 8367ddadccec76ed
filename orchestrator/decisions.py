"""One vocabulary for what the job loop is told and decides, and the one task snapshot that
monitors, the end rules and every table read. Plain data, no launcher import.

A monitor (the coordinator, a liveness probe) looks at a ``TaskState`` snapshot of every
task and may answer with a ``Decision``:
- ``finish``: training is done (max_steps reached); the job loop lets the tasks end;
- ``fail``: the job cannot go on (a stall), naming the silent tasks;
- ``lost``: these tasks are gone or unreachable although their processes may exist; the
  restart policies (launcher/restarts.py, the one judge of a lost task) decide what that
  means: restart the task, restart the cluster, or fail.
The restart policies answer an exit or a loss with ``ignore``, ``restart`` (``scope`` task
or cluster, after ``delay`` s, restart number ``attempt``), ``drop`` (the worker cannot come
back and the job goes on without it: its role's minimum still holds) or ``fail``.
"""

from __future__ import annotations

import signal
from dataclasses import dataclass
from typing import Final, Literal, NoReturn

# What a monitor tells the job loop, and what a restart policy answers (``fail`` both):
# mypy checks every value, and the loop's dispatches are exhaustive (``assert_never``).
Action = Literal["finish", "fail", "lost", "restart", "ignore", "drop"]
FINISH: Final = "finish"
FAIL: Final = "fail"
LOST: Final = "lost"
RESTART: Final = "restart"
IGNORE: Final = "ignore"
DROP: Final = "drop"
Scope = Literal["task", "cluster"]    # restart the lost task alone, or every task
TASK: Final = "task"
CLUSTER: Final = "cluster"


def assert_never(value: NoReturn) -> NoReturn:
    """The end of an exhaustive dispatch on ``Action``: mypy fails where a value is not
    handled (``typing.assert_never`` is Python 3.11's)."""
    raise AssertionError(f"not handled: {value!r}")


@dataclass(frozen=True)
class Decision:
    """What the job does next about some tasks, and the line that says why."""

    action: Action
    reason: str                   # the line shown to the user
    tasks: tuple[str, ...] = ()   # the tasks it is about ("ps:0")
    scope: Scope = TASK           # RESTART: the task alone or the whole cluster
    delay: float = 0.0            # RESTART: seconds before it starts again
    attempt: int = 0              # RESTART: restart number of the task that caused it

    @property
    def task(self) -> str | None:
        """The one task the decision names, if it names exactly one."""
        return self.tasks[0] if len(self.tasks) == 1 else None


@dataclass(frozen=True)
class TaskState:
    """One task as the job loop sees it at one moment: what monitors judge from, what the
    end rules (launcher/ending.py) read and what every table of tasks shows."""

    name: str                  # "ps:0"
    type: str                  # "ps"
    address: str = ""          # "host:port"
    alive: bool = True         # running, or about to be restarted (its policy acted)
    exit_status: str | None = None  # how it ended, in words ("killed (SIGKILL)", "1")
    stopped: bool = False      # ended because the launcher stopped it
    restarts: int = 0          # times the job loop started it again
    started_at: float | None = None  # job-loop clock time of its latest start
    restarting: bool = False   # ended, and its restart is due (alive stays True)
    running: bool = False      # its process runs now (started, not ended)
    status: int | None = None  # its exit status once ended (-N: killed by signal N)
    ended_at: float | None = None  # job-loop clock time of its exit
    quiet_for: float = 0.0     # s since its last output line (or its start)
    last_line: str = ""        # its last output line
    duration: float = 0.0      # s from its latest start to its exit (or to now)
    log: str = ""              # its log file
    pid: int | None = None     # its process (as the backend reports it)
    gpus: list[str] | None = None  # the GPUs the launcher placed it on (None: not placed)
    evaluated: int | None = None   # the newest evaluation its own output announced

    def words(self) -> str:
        """Its state in words (``state_words``)."""
        return state_words(self.status, self.running, self.stopped)

    @classmethod
    def of(cls, **given: object) -> TaskState:
        """``TaskState(**given)`` for every field, made 2-3 times faster: the job loop makes
        one for every task on every monitor tick, and a frozen dataclass's ``__init__`` sets
        each field through ``object.__setattr__``."""
        if len(given) != len(_FIELDS):
            raise TypeError(f"TaskState.of needs every field: {sorted(_FIELDS - given.keys())}")
        state = cls.__new__(cls)
        state.__dict__.update(given)
        return state


_FIELDS = frozenset(TaskState.__dataclass_fields__)


def state_words(status: int | None, running: bool, stopped: bool) -> str:
    """A task's state in words: "not started", "running", the exit status, or the signal
    that ended it ("stopped (SIGTERM)" when the launcher stopped it, else "killed")."""
    if status is None:
        return "running" if running else "not started"
    if status < 0:
        try:
            signame = signal.Signals(-status).name
        except ValueError:
            signame = f"signal {-status}"
        return f"stopped ({signame})" if stopped else f"killed ({signame})"
    return str(status)
