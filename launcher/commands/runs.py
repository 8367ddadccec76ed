"""`launch list`, `launch status RUN`, `launch logs RUN [TASK] [-f]`, `launch cancel RUN`:
follow any run, attached or detached, of any backend, from its run directory's state
(launcher/records/registry.py) and, where an engine owns the tasks, from the engine
(squeue, kubectl).

Exit status of ``status``: 0 while the run is starting, queued or running, and when it
succeeded; 1 when it failed, was cancelled, or its launcher died; 2 for an unknown run.
"""

from __future__ import annotations

import argparse
import os
import signal
import sys
import time
from typing import IO, TYPE_CHECKING

from launcher.output.summary import closing_line, row_cells
from launcher.output.table import rows_table, with_gpus
from launcher.records.registry import (
    CANCEL_FILE,
    LIVE,
    RunError,
    find_run,
    launcher_alive,
    list_runs,
    read_state,
    write_json_atomic,
)

if TYPE_CHECKING:
    from launcher.backends.engine import Follower

CANCEL_WAIT = 120.0      # seconds for the launcher's ordered teardown after SIGTERM
FOLLOW_EVERY = 0.2
LIST_HEADER = ("id", "name", "backend", "state", "started", "duration", "step")


# ---------------------------------------------------------------------- state, as seen now
def _engine(state: dict) -> type[Follower]:
    """The backend that follows this run: the one its state names."""
    from launcher.backends import following

    return following(state.get("backend"))


def current_state(state: dict) -> tuple[str, str | None]:
    """(state, note): the recorded state, corrected by what can be seen now. A live state
    whose launcher is gone is ``lost``; where an engine holds the run (a Slurm job, a
    TFJob), its backend asks the engine (``Follower.engine_state``)."""
    recorded: str = state["state"]      # a required field (registry.STATE_FIELDS)
    if recorded not in LIVE:
        return recorded, None
    engine = _engine(state).engine_state(state.get("handle") or {}, recorded)
    if engine is not None:
        return engine
    alive = launcher_alive(state)
    if alive is False:
        launcher = state.get("launcher", {})
        return "lost", (f"the launcher (pid {launcher.get('pid')} on {launcher.get('host')}) "
                        "died before the run ended; its watchdog ended the tasks")
    return recorded, None


def _clock(t: float | None) -> str:
    return time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(t)) if t else "-"


def _duration(state: dict) -> str:
    start = state.get("started")
    if not start:
        return "-"
    end = state.get("ended") or (time.time() if state.get("state") in LIVE else start)
    from launcher.output.progress import duration_text

    return duration_text(max(0.0, end - start))


def _progress(state: dict, detail: bool = False) -> str:
    """STEP/MAX_STEPS: the freshest step known (a trainer's output, the events file, a
    checkpoint: state.json's progress), not the newest checkpoint's alone; ``detail``:
    where it was seen, how long ago, and the checkpoint's step apart."""
    found = state.get("progress")
    progress: dict = found if isinstance(found, dict) else {}
    saved, top = state.get("step"), state.get("max_steps")
    step = progress.get("latest_step")
    if not isinstance(step, int) or (isinstance(saved, int) and saved > step):
        step = saved
    text = f"{step if step is not None else '-'}/{top if top is not None else '-'}"
    if not detail or step is None or step == saved:
        return text
    from launcher.commands.status_document import step_age
    from launcher.output.progress import duration_text

    age = step_age(progress)
    where = progress.get("step_source") or "model_dir"
    seen = f"{where} {duration_text(age)} ago" if age is not None else where
    return f"{text} ({seen}; checkpoint at step {saved if saved is not None else '-'})"


def task_table(state: dict, run_dir: str, now: str | None = None, every: bool = True
               ) -> str:
    """The closing summary's columns: task, address, exit, duration, restarts, log. For a
    run whose launcher died, a task it left running is shown gone or still running.
    ``every``: one row per task, else grouped by role above GROUP_ABOVE tasks."""
    from launcher.output.grouped import grouped_table
    from launcher.records.registry import process_started

    rows = []
    live = state.get("state") in LIVE
    for t in state.get("tasks", []):
        secs = time.time() - t["since"] if live and t.get("since") else t.get("duration") or 0
        shown = t["state"]
        if now == "lost" and shown == "running":
            alive = t.get("pid") and process_started(t["pid"]) is not None
            shown = "still running (orphan)" if alive else "gone"
        rows.append(row_cells(t, shown, secs,
                              os.path.join(run_dir, t["log"]) if t["log"] != "-" else "-"))
    if not rows:
        return "(no task started yet)"
    gpus = [t.get("gpus") for t in state.get("tasks", [])]
    if every:
        return rows_table(*with_gpus(rows, gpus))
    return grouped_table(rows, f"launch status {state.get('run_id', run_dir)} --all", gpus)


# ---------------------------------------------------------------------- list
def _root_parser(prog: str, description: str) -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog=f"launch {prog}", description=description)
    p.add_argument("--root", metavar="DIR",
                   help="the run root (default: $TFCLUSTER_RUNS, else .tfcluster/runs)")
    return p


def _run_parser(prog: str, description: str) -> argparse.ArgumentParser:
    p = _root_parser(prog, description)
    p.add_argument("run", metavar="RUN", help="run id (or a unique prefix), or run directory")
    return p


def _rows_parser(prog: str, description: str) -> argparse.ArgumentParser:
    """A run command that takes ``--all``: every task's row."""
    p = _run_parser(prog, description)
    p.add_argument("--all", action="store_true",
                   help="one row per task (above 16 tasks: one line per role and the "
                        "outliers)")
    return p


def _open_run(args: argparse.Namespace) -> tuple[str, dict]:
    """(run directory, state) of the RUN argument; RunError (exit 2) otherwise."""
    run_dir = find_run(args.run, args.root)
    return run_dir, read_state(run_dir)


def list_main(argv: list[str]) -> int:
    p = _root_parser("list", "The runs under the run root, newest first.")
    args = p.parse_args(argv)
    rows, unreadable = [], []
    for run_dir, state in list_runs(args.root):
        if isinstance(state, RunError):
            kind = "other version" if "another version" in str(state) else "damaged"
            rows.append((os.path.basename(run_dir), "?", "?", kind, "-", "-", "-"))
            unreadable.append(str(state))
            continue
        now, _ = current_state(state)
        rows.append((state["run_id"], state["name"], state["backend"], now,
                     _clock(state.get("started")), _duration(state), _progress(state)))
    print(rows_table(rows, LIST_HEADER) if rows else "no runs")
    for problem in unreadable:        # one line per run that cannot be listed
        print(f"launch list: {problem}", file=sys.stderr)
    return 0


# ---------------------------------------------------------------------- status
def status_main(argv: list[str]) -> int:
    p = _rows_parser("status", "A run's state, progress and per-task rows. Exit 0 while it "
                               "runs or when it succeeded, 1 when it failed, was cancelled or "
                               "its launcher died.")
    p.add_argument("--json", action="store_true",
                   help="one JSON document (cluster_specs/status.schema.json) instead")
    args = p.parse_args(argv)
    if args.json and args.all:
        raise RunError("--all goes without --json (the document holds every task)")
    run_dir, state = _open_run(args)
    now, note = current_state(state)
    if not state.get("tasks"):       # no launcher follows it: the engine may show them
        state["tasks"] = _engine(state).engine_tasks(state.get("handle") or {}) or []
    if args.json:
        import json

        from launcher.commands.status_document import status_document

        print(json.dumps(status_document(state, run_dir, now, note), indent=1,
                         default=str))
    else:
        print("\n".join(status_lines(state, now, note)))
        print(task_table(state, run_dir, now, every=args.all))
    return 0 if now in LIVE + ("succeeded",) else 1


def status_lines(state: dict, now: str, note: str | None) -> list[str]:
    """`launch status`'s lines above the task table: the run, where the engine holds it,
    its state and progress, why it ended, its preemption, lease and TensorBoard."""
    where = _engine(state).describe_handle(state.get("handle") or {})
    where = f"  {where}" if where else ""
    attempt = f"  attempt {state['attempt'] + 1}" if state.get("attempt") else ""
    lines = [f"run {state['run_id']}  {state['name']}  backend {state['backend']}{where}  "
             f"state {now}{attempt}",
             f"started {_clock(state.get('started'))}  duration {_duration(state)}  "
             f"step {_progress(state, detail=True)}  restarts {state.get('restarts', 0)}"]
    if note:
        lines.append(note)
    if state.get("reason"):
        lines.append(f"reason: {state['reason']}")
    summary = state.get("summary") or {}
    preemption = summary.get("preemption")
    if preemption:      # the step reached, the step saved, the steps lost
        status = summary.get("status")
        lines.append(closing_line(preemption, status if isinstance(status, int) else None))
    from launcher.records.lease import status_line

    lease = status_line(state, lost=now == "lost")
    if lease:
        lines.append(lease)
    board = state.get("tensorboard")
    if board:
        lines.append(tensorboard_line(board, now in LIVE, state["run_id"]))
    from launcher.commands.status_document import tracking_link

    mlflow = tracking_link(state)
    if mlflow:
        lines.append(f"mlflow: {mlflow['url']}" + (
            f" ({mlflow['unlogged']} requests not logged: tracking_unlogged.jsonl)"
            if mlflow.get("unlogged") else ""))
    return lines



def tensorboard_line(board: dict, live: bool, run_id: str) -> str:
    """The run's TensorBoard as `launch status` shows it."""
    again = f"`launch tensorboard {run_id}` serves the run"
    if live and board.get("state") == "running":
        tunnel = f" (not reachable from its launcher: {board['tunnel']})" \
            if board.get("tunnel") else ""
        return f"tensorboard: {board['url']}{tunnel}"
    if live and board.get("state") == "starting":
        return "tensorboard: starting"
    if board.get("note") and board.get("state") != "ended":
        return f"tensorboard: {board['note']}; {again}"
    return f"tensorboard: ended with the run; {again}"


# ---------------------------------------------------------------------- logs
def _log_of(state: dict, run_dir: str, task: str) -> tuple[str, str]:
    """(name, path) of one task's log; 'launcher' is the detached launcher's own output."""
    if task == "launcher":
        return task, os.path.join(run_dir, "launcher.log")
    wanted = task if ":" in task else f"{task}:0"
    wanted = wanted.replace("-", ":") if ":" not in task and "-" in task else wanted
    for t in state.get("tasks", []):
        if t["task"] == wanted:
            return t["task"], os.path.join(run_dir, t["log"])
    names = ", ".join(t["task"] for t in state.get("tasks", [])) or "none started yet"
    raise RunError(f"run {state['run_id']} has no task {task!r} (tasks: {names}, launcher)")


def logs_main(argv: list[str], out: IO[str] | None = None) -> int:
    p = _run_parser("logs", "A task's log, or every task's log with [task] prefixes.")
    p.add_argument("task", metavar="TASK", nargs="?",
                   help="chief:0, worker:1, ps, evaluator... or 'launcher' (default: all)")
    p.add_argument("-f", "--follow", action="store_true",
                   help="keep printing new lines until the run ends")
    args = p.parse_args(argv)
    out = out or sys.stdout
    run_dir, state = _open_run(args)
    if args.task:
        logs = [_log_of(state, run_dir, args.task)]
    else:
        logs = [(t["task"], os.path.join(run_dir, t["log"])) for t in state.get("tasks", [])]
    prefix = args.task is None
    offsets: dict[str, int] = {}
    while True:
        _print_new(logs, offsets, prefix, out)
        if not args.follow:
            return 0
        state = read_state(run_dir)
        if not args.task:       # tasks that started since
            known = {n for n, _ in logs}
            logs += [(t["task"], os.path.join(run_dir, t["log"]))
                     for t in state.get("tasks", []) if t["task"] not in known]
        if current_state(state)[0] not in LIVE:
            _print_new(logs, offsets, prefix, out)
            return 0
        time.sleep(FOLLOW_EVERY)


def _print_new(logs: list[tuple[str, str]], offsets: dict[str, int], prefix: bool,
               out: IO[str]) -> None:
    for name, path in logs:
        try:
            with open(path, "rb") as f:
                if os.fstat(f.fileno()).st_size < offsets.get(path, 0):
                    offsets[path] = 0       # a new file (the next attempt of a requeued run)
                f.seek(offsets.get(path, 0))
                data = f.read()
        except OSError:
            continue
        end = data.rfind(b"\n") + 1           # whole lines only; the rest comes next time
        if not end:
            continue
        offsets[path] = offsets.get(path, 0) + end
        for line in data[:end].decode(errors="replace").splitlines():
            out.write(f"[{name}] {line}\n" if prefix else f"{line}\n")
    out.flush()


# ---------------------------------------------------------------------- cancel
def cancel_main(argv: list[str]) -> int:
    p = _run_parser("cancel", "Stop a run with the same ordered teardown as Ctrl-C; "
                               "nothing is left running.")
    args = p.parse_args(argv)
    run_dir, state = _open_run(args)
    now, _ = current_state(state)
    if state.get("state") not in LIVE:
        print(f"run {state['run_id']} already ended: {state['state']}")
        return 0
    write_json_atomic(os.path.join(run_dir, CANCEL_FILE), {"time": time.time(),
                                                           "pid": os.getpid()})
    handle, engine = state.get("handle") or {}, _engine(state)
    inside = engine.launcher_inside(handle)
    if not inside:          # a launcher on this machine: its own ordered teardown
        _stop_launcher(state, run_dir)
    engine.cancel_run(handle, queued=now == "queued" or not inside)
    end_leftovers(state["run_id"])
    state = read_state(run_dir)
    if state.get("state") in LIVE:        # no launcher recorded the end: record it here
        state.update(state="cancelled", ended=time.time(),
                     reason=f"cancelled by `launch cancel` ({now} when cancelled)")
        write_json_atomic(os.path.join(run_dir, "state.json"), state)
    print(f"cancelled run {state['run_id']}: {state.get('reason')}")
    return 0


def _stop_launcher(state: dict, run_dir: str) -> None:
    """SIGTERM to the run's launcher (its job loop stops every task, ps last); SIGKILL when
    it does not end in time (its watchdog then ends the tasks)."""
    if not launcher_alive(state):
        return
    pid = state["launcher"]["pid"]
    os.kill(pid, signal.SIGTERM)
    deadline = time.monotonic() + CANCEL_WAIT
    while launcher_alive(state) and time.monotonic() < deadline:
        time.sleep(0.1)
    if launcher_alive(state):
        os.kill(pid, signal.SIGKILL)


def end_leftovers(run_id: str, grace: float = 5.0) -> list[int]:
    """Processes on this machine that belong to the run (TFCLUSTER_RUN_ID in their
    environment) and are still alive: SIGTERM, then SIGKILL. Their pids."""
    import psutil

    found = []
    for proc in psutil.process_iter(["pid"]):
        try:
            if proc.environ().get("TFCLUSTER_RUN_ID") == run_id:
                found.append(proc)
        except (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess):
            continue
    for proc in found:
        try:
            proc.terminate()
        except psutil.NoSuchProcess:
            pass
    _, alive = psutil.wait_procs(found, timeout=grace)
    for proc in alive:
        try:
            proc.kill()
        except psutil.NoSuchProcess:
            pass
    return [p.pid for p in found]

