"""The run registry: every run keeps its state in its run directory (``state.json``).

The launcher that runs the job is the only writer while it lives; each write replaces the
file atomically (temp file + rename), so ``launch list/status`` read a whole state at any
moment. The state holds the plan's file, each task's state and exit, the backend's handle
(Slurm job id, Kubernetes object names), the launcher's pid and host, progress (newest
checkpoint step) and, at the end, the summary. ``version`` guards the format: a run
directory written by another version is refused with one clear line.

Run states: ``starting`` (checks, before the tasks run), ``queued`` (submitted to an
engine, not running yet), ``running``, then ``succeeded``, ``failed`` or ``cancelled``.
"""

from __future__ import annotations

import json
import os
import socket
import threading
import time
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any, Callable

from launcher.errors import UsageError
from launcher.records.events import EventLog
from launcher.signals import PREEMPTED

if TYPE_CHECKING:
    from launcher.plan import JobPlan
    from orchestrator.decisions import TaskState

VERSION = 1
STATE_FILE = "state.json"
CANCEL_FILE = "cancel.json"
DEFAULT_ROOT = os.path.join(".tfcluster", "runs")
ROOT_ENV = "TFCLUSTER_RUNS"
LIVE = ("starting", "queued", "running")
# The progress (step, rate, ETA, newest evaluation) goes into state.json at once when the
# step or the evaluation changes, else at most this often (s): `launch status --json` reads it.
PROGRESS_EVERY = 5.0
# While tasks start and end, their rows in state.json are rewritten at most this often (s):
# one write holds every row, so a write per event would cost O(N) per task, O(N²) a run.
ROWS_EVERY = 0.5
TASK_EVENTS = ("task_started", "task_exited", "restart_scheduled", "stopping", "job_started")
TERMINAL = ("succeeded", "failed", "cancelled", "preempted")


class RunError(UsageError):
    """An unknown run, or a run directory this version cannot read: exit 2."""


def json_text(doc: Any) -> str:
    """``doc`` as JSON, a key per line and a list of objects (the task rows) an object per
    line: readable, and written by json's C encoder (an ``indent`` would take its pure-Python
    one: ~10x the CPU for a thousand task rows, rewritten while the tasks start)."""
    return "".join(json_pieces(doc))


def json_pieces(doc: Any) -> Iterator[str]:
    """``json_text`` piece by piece (a line each): a large document (plan.json of 1,000
    tasks, 20 MB) is written without being held whole."""
    if not isinstance(doc, dict):
        yield json.dumps(doc, default=str)
        return
    for n, (key, value) in enumerate(doc.items()):
        head = "{\n" if n == 0 else ",\n"
        if isinstance(value, list) and value and all(isinstance(x, dict) for x in value):
            yield f"{head} {json.dumps(key)}: [\n"
            for i, item in enumerate(value):
                yield ("  " if i == 0 else ",\n  ") + json.dumps(item, default=str)
            yield "\n ]"
        else:
            yield f"{head} {json.dumps(key)}: {json.dumps(value, default=str)}"
    yield "\n}\n" if doc else "{}\n"


def write_json_atomic(path: str, doc: Any) -> None:
    """Write ``doc`` so that a reader sees the old file or the new one, never half."""
    tmp = f"{path}.tmp-{os.getpid()}-{threading.get_ident()}"
    try:
        with open(tmp, "w", encoding="utf-8") as f:
            f.write(json_text(doc))
        os.replace(tmp, path)
    except BaseException:
        try:
            os.remove(tmp)
        except OSError:
            pass
        raise


def runs_root(root: str | None = None) -> str:
    return root or os.environ.get(ROOT_ENV) or DEFAULT_ROOT


def process_started(pid: int) -> float | None:
    """The process's start time (seconds since the epoch), None when there is no such
    process (zombies count as gone). Read from /proc where there is one, as psutil
    computes it (its import is not on a launch's way to its first task), else psutil."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            fields = f.read().rsplit(b")", 1)[1].split()
    except FileNotFoundError:
        return None if os.path.isdir("/proc/self") else _started_by_psutil(pid)
    except (OSError, IndexError):
        return _started_by_psutil(pid)
    if fields[0] == b"Z":
        return None
    return _boot_time() + int(fields[19]) / os.sysconf("SC_CLK_TCK")


_BOOT: list[float] = []


def _boot_time() -> float:
    """When this machine booted (seconds since the epoch), from /proc/stat's btime."""
    if not _BOOT:
        with open("/proc/stat", "rb") as f:
            _BOOT.append(float(next(line for line in f if line.startswith(b"btime")).split()[1]))
    return _BOOT[0]


def _started_by_psutil(pid: int) -> float | None:
    import psutil

    try:
        proc = psutil.Process(pid)
        if proc.status() == psutil.STATUS_ZOMBIE:
            return None
        return proc.create_time()
    except (psutil.NoSuchProcess, psutil.AccessDenied):
        return None


def launcher_alive(state: dict) -> bool | None:
    """Whether the run's launcher process still runs; None when it runs on another host
    (a Slurm node) and cannot be seen from here."""
    launcher = state.get("launcher") or {}
    pid = launcher.get("pid")
    if not pid:
        return None
    if launcher.get("host") != socket.gethostname():
        return None
    started = process_started(pid)
    return started is not None and abs(started - launcher.get("create_time", started)) < 1.0


_NUMBER = (int, float)
# What the readers of state.json rely on: (field, types, required). An optional field may
# be absent or null.
STATE_FIELDS: tuple[tuple[str, Any, bool], ...] = (
    ("run_id", str, True), ("name", str, True), ("backend", str, True), ("state", str, True),
    ("started", _NUMBER, False), ("ended", _NUMBER, False), ("step", int, False),
    ("max_steps", int, False), ("restarts", int, False), ("attempt", int, False),
    ("reason", str, False), ("launcher", dict, False), ("handle", dict, False),
    ("tasks", list, False), ("lease", dict, False))
TASK_FIELDS: tuple[tuple[str, Any, bool], ...] = (
    ("task", str, True), ("address", str, True), ("state", str, True), ("log", str, True),
    ("duration", _NUMBER, False), ("since", _NUMBER, False), ("restarts", int, False),
    ("pid", int, False))


NESTED_FIELDS: dict[str, tuple[tuple[str, Any, bool], ...]] = {
    "launcher": (("pid", int, False), ("host", str, False), ("create_time", _NUMBER, False)),
}


def _kind(value: Any) -> str:
    return {dict: "an object", list: "a list", str: "a string", bool: "a boolean",
            type(None): "null"}.get(type(value), "a number")


def _problem(doc: Any, fields: tuple[tuple[str, Any, bool], ...], where: str = ""
             ) -> str | None:
    if not isinstance(doc, dict):
        return f"{where or 'the state'} is {_kind(doc)}, not an object"
    for key, types, required in fields:
        value = doc.get(key)
        if value is None and not required:
            continue
        if value is None or not isinstance(value, types) or isinstance(value, bool):
            return f"{where}{key} is {'missing' if value is None else _kind(value)}"
    return None


def state_problem(state: Any) -> str | None:
    """What makes a state.json of this version unusable (a foreign or hand-edited file),
    or None."""
    problem = _problem(state, STATE_FIELDS)
    if problem:
        return problem
    for key, fields in NESTED_FIELDS.items():
        problem = _problem(state.get(key) or {}, fields, f"{key}.")
        if problem:
            return problem
    for i, row in enumerate(state.get("tasks") or []):
        problem = _problem(row, TASK_FIELDS, f"tasks[{i}].")
        if problem:
            return problem
    return None


def read_record(path: str, missing: str) -> Any:
    """One JSON file of a run directory (state.json, plan.json); RunError, one line:
    ``missing`` when there is none, or naming the file when it is damaged or unreadable."""
    try:
        with open(path, encoding="utf-8") as f:
            return json.load(f)
    except FileNotFoundError:
        raise RunError(missing) from None
    except ValueError as e:
        raise RunError(f"{path} is damaged: not JSON, or cut short ({e})") from None
    except OSError as e:
        raise RunError(f"{path} cannot be read: {e.strerror or e}") from None


def read_state(run_dir: str) -> dict:
    """The state of one run directory; RunError (one line) when it is missing, of another
    version, truncated or damaged."""
    path = os.path.join(run_dir, STATE_FILE)
    state = read_record(path, f"{run_dir} is not a run directory (no {STATE_FILE})")
    if not isinstance(state, dict) or "version" not in state:
        raise RunError(f"{path} is damaged: " + ("no version: not a state file of tfcluster"
                                                 if isinstance(state, dict)
                                                 else state_problem(state) or "?"))
    version = state["version"]
    if version != VERSION:
        raise RunError(f"{run_dir} was written by another version of tfcluster (state version "
                       f"{version!r}, this launch reads version {VERSION})")
    problem = state_problem(state)
    if problem:
        raise RunError(f"{path} is damaged: {problem}")
    return state


def find_run(run: str, root: str | None = None) -> str:
    """The run directory of RUN: a path to a run directory, or a run id (or a unique
    prefix of one) of a run listed under the run root: a run directory there (by its name
    or the id in its state), or the link a run kept elsewhere left there (``link_run``)."""
    if os.path.isfile(os.path.join(run, STATE_FILE)):
        return run
    if os.sep in run and os.path.isdir(run):
        raise RunError(f"{run} is not a run directory (no {STATE_FILE})")
    base = runs_root(root)
    exact = os.path.join(base, run)
    if os.path.isfile(os.path.join(exact, STATE_FILE)):
        return exact
    if os.sep not in run:
        ids = _run_ids(base)
        matches = [d for d, i in ids if i == run] or \
            [d for d, i in ids if i.startswith(run) or os.path.basename(d).startswith(run)]
        if len(matches) == 1:
            return matches[0]
        if len(matches) > 1:
            raise RunError(f"run id {run!r} is ambiguous under {base}: "
                           + ", ".join(sorted(i for d, i in ids if d in matches)))
    raise RunError(f"no run {run!r} under {base} (`launch list` shows the runs; give "
                   "--root for another run root)")


def _run_ids(base: str) -> list[tuple[str, str]]:
    """(run directory, run id) of every run under ``base``: the id its state names (its
    directory's name when the state cannot be read)."""
    found = []
    for d in _run_dirs(base):
        try:
            with open(os.path.join(d, STATE_FILE), encoding="utf-8") as f:
                run_id = json.load(f).get("run_id")
        except (OSError, ValueError, AttributeError):
            run_id = None
        found.append((d, run_id if isinstance(run_id, str) else os.path.basename(d)))
    return found


def _run_dirs(base: str) -> list[str]:
    """The run directories under ``base`` (links to those kept elsewhere included), each
    once."""
    try:
        entries = sorted(os.listdir(base))
    except OSError:
        return []
    found, seen = [], set()
    for e in entries:
        d = os.path.join(base, e)
        if not os.path.isfile(os.path.join(d, STATE_FILE)):
            continue            # not a run, or a link whose run directory was removed
        real = os.path.realpath(d)
        if real not in seen:
            seen.add(real)
            found.append(d)
    return found


def link_run(run_dir: str, run_id: str, root: str | None = None) -> str | None:
    """List a run kept outside the run root (``--run-dir``, a spec's ``run_dir``) there:
    a link ROOT/RUN_ID to its directory, so that `launch list` shows it and
    `status`/`logs`/`cancel` take its id. The link's path, None when the run directory is
    in the root already (or the root cannot take a link: the run is then found by its
    directory)."""
    base = runs_root(root)
    target = os.path.abspath(run_dir)
    link = os.path.join(base, run_id)
    if os.path.dirname(target) == os.path.abspath(base):
        return None
    try:
        if os.path.islink(link) and os.path.realpath(link) == os.path.realpath(target):
            return link
        if os.path.lexists(link) and not os.path.islink(link):
            return None         # a run directory of that name: never replaced
        os.makedirs(base, exist_ok=True)
        tmp = f"{link}.tmp-{os.getpid()}"
        os.symlink(target, tmp)
        os.replace(tmp, link)
    except OSError:
        return None
    return link


def list_runs(root: str | None = None) -> list[tuple[str, dict | RunError]]:
    """(run_dir, state) of every run under the root, newest first; in place of the state,
    the RunError that says why it cannot be read (another version, damaged)."""
    out: list[tuple[str, dict | RunError]] = []
    for d in _run_dirs(runs_root(root)):
        try:
            out.append((d, read_state(d)))
        except RunError as e:
            out.append((d, e))
    return sorted(out, key=lambda x: -((x[1].get("started") or 0) if isinstance(x[1], dict)
                                       else 0))


def run_state_name(status: int) -> str:
    """The run state for a launcher exit status: 0 succeeded, 128+N interrupted by a
    signal (Ctrl-C, ``launch cancel``, the engine's cancel), else failed."""
    if status == 0:
        return "succeeded"
    if status == PREEMPTED:
        return "preempted"
    return "cancelled" if status > 128 else "failed"


class RunState:
    """The launcher's side: keeps ``state.json`` up to date from the job's events."""

    def __init__(self, run_dir: str, run_id: str, name: str, backend: str, *,
                 max_steps: int | None, detached: bool = False, spec_path: str | None = None,
                 state: str = "starting", attempt: int = 0, handle: dict | None = None):
        self.run_dir = run_dir
        self.path = os.path.join(run_dir, STATE_FILE)
        self._lock = threading.RLock()
        self._rows_written = 0.0            # monotonic time of the last rows write
        self._progress_written = 0.0        # ... and of the last progress write
        self._rows_timer: threading.Timer | None = None
        self.snapshot: Callable[[], list[TaskState]] | None = None
        self.restarts = 0       # restart incidents of the job followed
        self.on_running: Callable[[dict], None] | None = None
        self.on_error: Callable[[OSError], None] | None = None
        now = time.time()
        self.doc: dict[str, Any] = {
            "version": VERSION, "run_id": run_id, "name": name, "backend": backend,
            "state": state, "detached": detached, "attempt": attempt,
            "spec": os.path.abspath(spec_path) if spec_path else None,
            "run_dir": os.path.abspath(run_dir), "plan": "plan.json",
            "started": now, "ended": None,
            "launcher": self._me(), "handle": dict(handle or {}),
            "max_steps": max_steps, "step": None, "checkpoint": None, "restarts": 0,
            "reason": None, "status": None, "tasks": [], "summary": None,
        }

    @staticmethod
    def _me() -> dict:
        pid = os.getpid()
        return {"pid": pid, "host": socket.gethostname(), "create_time": process_started(pid)}

    @classmethod
    def resume(cls, run_dir: str, **kwargs) -> RunState:
        """The state of a run started again in the same run directory (a requeued Slurm
        job): same run id and start time, attempt from ``kwargs``."""
        new = cls(run_dir, **kwargs)
        try:
            old = read_state(run_dir)
        except RunError:
            return new
        new.doc["started"] = old.get("started", new.doc["started"])
        new.doc["handle"] = {**old.get("handle", {}), **new.doc["handle"]}
        new.doc["step"] = old.get("step")
        return new

    def update(self, **fields: Any) -> None:
        """Record ``fields``; a state file that cannot be written (a full disk, the run
        directory removed) never raises: the next write tries again, ``on_error`` is told."""
        with self._lock:
            self.doc.update(fields)
            try:
                write_json_atomic(self.path, self.doc)
            except OSError as e:
                if self.on_error is not None:
                    self.on_error(e)

    def attach(self, snapshot: Callable[[], list[TaskState]]) -> None:
        """Follow a job through ``snapshot`` (``Job.snapshot``): its task rows go into the
        state; its restarts are counted from its events."""
        self.snapshot = snapshot
        self.restarts = 0
        self.update(tasks=self._rows())

    def _tasks(self) -> list[TaskState]:
        return self.snapshot() if self.snapshot is not None else []

    def _rows(self, tasks: list[TaskState] | None = None) -> list[dict]:
        """state.json's task rows: task_rows' (launcher/output/summary.py) with the pid,
        since when a running task runs, the log relative to the run directory."""
        from launcher.output.summary import task_rows

        tasks = self._tasks() if tasks is None else tasks
        rows = []
        for task, row in zip(tasks, task_rows(tasks)):
            rows.append({"task": row["task"], "address": row["address"], "gpus": row["gpus"],
                         "state": row["status"], "exit": row["exit"],
                         "stopped": row["stopped"], "restarts": row["restarts"],
                         "pid": task.pid, "duration": row["duration"],
                         "since": (round(time.time() - task.duration, 3)
                                   if task.running else None),
                         "log": self._relative(row["log"])})
        return rows

    def _relative(self, path: str) -> str:
        """``path`` relative to the run directory (a task's log is below it: no relpath,
        whose cost a thousand rows rewritten every ROWS_EVERY would pay)."""
        inside = os.path.join(self.run_dir, "")
        return path[len(inside):] if path.startswith(inside) and path != inside else \
            os.path.relpath(path, self.run_dir)

    def record_progress(self, progress: dict[str, Any]) -> None:
        """The job's progress as the coordinator sees it now (``progress_fields``,
        launcher/output/progress.py): written when a new checkpoint or evaluation came, else
        ``PROGRESS_EVERY`` s after the last write (the rate, the ETA and the events file's
        step move on every poll; one write holds every task's row)."""
        old = self.doc.get("progress") or {}
        moved = any(old.get(k) != progress.get(k) for k in ("step", "evaluation"))
        now = time.monotonic()
        if not moved and now - self._progress_written < PROGRESS_EVERY:
            return
        self._progress_written = now
        self.update(progress={**progress, "at": time.time()})

    def on_event(self, event: str, fields: dict[str, Any]) -> None:
        """Called for every event the run's EventLog writes."""
        if event == "checkpoint":
            self.update(step=fields.get("step"), checkpoint=fields.get("name"))
        elif event in TASK_EVENTS:
            self.restarts += event == "restart_scheduled"
            self._rows_changed()
        elif event == "job_ended":
            self._cancel_rows_timer()
            self.update(tasks=self._rows(), reason=fields.get("reason"),
                        status=fields.get("status"))

    def _rows_changed(self) -> None:
        """Write the task rows now, or once ``ROWS_EVERY`` has passed since the last write
        (a timer; the events in between are in that one write)."""
        with self._lock:
            if self._rows_timer is not None:
                return
            delay = self._rows_written + ROWS_EVERY - time.monotonic()
            if delay <= 0:
                self._write_rows()
                return
            self._rows_timer = threading.Timer(delay, self._write_rows_later)
            self._rows_timer.daemon = True
            self._rows_timer.start()

    def _write_rows_later(self) -> None:
        try:
            with self._lock:
                if self._rows_timer is None:
                    return          # cancelled: the end wrote them
                self._rows_timer = None
                self._write_rows()
        except OSError:
            pass        # a full disk must not end the job; the event log has it all

    def _cancel_rows_timer(self) -> None:
        with self._lock:
            if self._rows_timer is not None:
                self._rows_timer.cancel()
                self._rows_timer = None

    def _write_rows(self) -> None:
        """Every task's row and the restarts; ``running`` once every task started."""
        self._rows_written = time.monotonic()
        tasks = self._tasks()
        change: dict[str, Any] = {"tasks": self._rows(tasks)}
        if self.snapshot is not None:
            change["restarts"] = self.restarts
            if self.doc["state"] not in ("running", *TERMINAL) and all(
                    t.started_at is not None for t in tasks):
                change["state"] = "running"
        self.update(**change)
        if change.get("state") == "running" and self.on_running is not None:
            self.on_running(self.doc)
            self.on_running = None

    def finish(self, status: int, reason: str, summary: dict | None = None,
               requeued: bool = False, step: int | None = None) -> None:
        """Record the end of this launcher's run: the run's end, or, when the engine
        requeued the job (``requeued``), a run queued to resume. ``step``: where training
        ended, from the last read of model_dir (the coordinator's last poll may be older)."""
        ended = {"step": step} if step is not None else {}
        self._cancel_rows_timer()
        if requeued:
            self.update(state="queued", status=status, summary=summary, **ended,
                        reason=f"requeued by Slurm ({reason}): the next attempt resumes "
                               "from the newest checkpoint", tasks=self._rows())
            return
        state = run_state_name(status)
        if state == "cancelled" and os.path.exists(os.path.join(self.run_dir, CANCEL_FILE)):
            reason = f"cancelled by `launch cancel` ({reason})"
        self.update(state=state, status=status, reason=reason, ended=time.time(),
                    summary=summary, tasks=self._rows() or self.doc["tasks"], **ended)


class RunLog(EventLog):
    """The run's event log that also keeps ``state.json`` current."""

    def __init__(self, path: str | None, state: RunState):
        super().__init__(path)
        self.state = state
        # told every event after state.json (the run's MLflow tracker): each must return
        # at once and never raise
        self.observers: list[Callable[[str, dict[str, Any]], None]] = []

    def write(self, event: str, **fields) -> None:
        super().write(event, **fields)
        try:
            self.state.on_event(event, fields)
        except OSError:
            pass        # a full disk must not end the job; the event log has it all
        for observer in self.observers:
            observer(event, fields)


def open_state(run_dir: str, plan: JobPlan, *, backend: str, handle: dict[str, Any],
               spec_path: str | None = None, root: str | None = None, detached: bool = False,
               attempt: int = 0, inside_job: bool = False) -> RunState:
    """The state of the run the launcher starts now: new, or the next attempt of the same
    run (a requeued Slurm job runs its batch script again with the same run id).
    ``backend``: its name; ``handle``: the run's in its engine ({} without one);
    ``spec_path``: the spec it ran; ``root``: the run root that lists it (--root);
    ``detached``: started by --detach; ``attempt``: times it was started before;
    ``inside_job``: the launcher runs inside the engine's job, whose submitting launch
    wrote the state first (a detached run too)."""
    kwargs: dict[str, Any] = dict(
        run_id=plan.run_id, name=plan.name, backend=backend, max_steps=plan.max_steps,
        detached=detached or inside_job, spec_path=spec_path, attempt=attempt, handle=handle)
    resumed = attempt or inside_job     # the submitting launch wrote the state first
    state = RunState.resume(run_dir, **kwargs) if resumed else RunState(run_dir, **kwargs)
    link_run(run_dir, plan.run_id, root)
    if attempt:
        keep_old_logs(run_dir, attempt)
    state.update()
    return state


def keep_old_logs(run_dir: str, attempt: int) -> None:
    """Before attempt N starts, the previous attempts' task logs move to logs/attempt-K/."""
    logs = os.path.join(run_dir, "logs")
    if not os.path.isdir(logs):
        return
    dest = os.path.join(logs, f"attempt-{attempt - 1}")
    os.makedirs(dest, exist_ok=True)
    for name in os.listdir(logs):
        if name.endswith(".log"):
            os.replace(os.path.join(logs, name), os.path.join(dest, name))
