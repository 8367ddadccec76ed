"""`launch SPEC --detach`: start or submit the job, return once it runs or is queued.

- Engines that run whole jobs (those the registry names a ``Submitter`` for,
  launcher/backends/engine.py: Slurm, Kubernetes' TFJob and JobSet) get the job submitted:
  its batch request (Slurm's: an ``sbatch`` script that runs this launcher inside the
  allocation) is what ``--dry-run`` prints and what ``submit`` hands the engine; nothing of
  the job depends on this process afterwards.
- Every other backend (local, ssh): the launcher goes on as a daemon in a session of its
  own (fork, setsid, fork), stdin from /dev/null, stdout and stderr into the run
  directory's ``launcher.log``, working directory unchanged (relative paths of the spec keep
  their meaning). It runs the very same job loop, watchdog and teardown as an attached
  run; closing the terminal does not reach it. This process waits until every task has
  started (or the daemon reported an error, exit 2 for bad input) and returns.
"""

from __future__ import annotations

import os
import shlex
import sys
from typing import TYPE_CHECKING, Any

from launcher.backends import following, submitter
from launcher.errors import UsageError

if TYPE_CHECKING:
    from launcher.api import RunOptions
    from launcher.backends.base import Backend
    from launcher.backends.engine import Submitter
    from launcher.plan import JobPlan
    from launcher.spec import Spec

LAUNCHER_LOG = "launcher.log"


def relaunch_argv(args: RunOptions, command: list[str] | None, run_dir: str,
                  run_id: str) -> list[str]:
    """This launcher's command line for inside the engine's job: same spec and options,
    this run's id and directory."""
    argv = [sys.executable, "-m", "launcher.cli", os.path.abspath(args.spec or ""),
            "--in-allocation",
            "--run-id", run_id, "--run-dir", run_dir, "--quiet"]
    if args.retrain:
        argv.append("--retrain")
    if args.force:
        argv.append("--force")
    if args.root:
        argv += ["--root", os.path.abspath(args.root)]
    if command:
        argv += ["--", *command]
    return argv


def follow_commands(run_id: str, run_dir: str, root: str | None = None) -> list[str]:
    """`launch status/logs/cancel` of the run: by its id where the run root lists it
    (with ``--root ROOT`` when the launch was given one), else by its directory."""
    from launcher.records.registry import RunError, find_run

    try:
        ref = run_id if os.path.samefile(find_run(run_id, root), run_dir) else run_dir
    except (RunError, OSError):
        ref = run_dir
    where = f" --root {shlex.quote(root)}" if root and ref == run_id else ""
    return [f"launch {verb} {shlex.quote(ref)}{where}" for verb in ("status", "logs", "cancel")]


def detach(spec: Spec, backend: Backend, command: list[str] | None,
           args: RunOptions) -> int:
    from launcher.api import check_lease, default_run_dir, make_plan, render_dry_run

    if not args.dry_run:
        check_lease(spec, args)
    submits = submitter(backend)
    if submits is not None:
        plan = make_plan(spec, backend, command, run_id=args.run_id)
        run_dir = os.path.abspath(args.run_dir or default_run_dir(spec, plan.run_id, args.root))
        relaunch = relaunch_argv(args, command, run_dir, plan.run_id)
        if args.dry_run:
            request = submits.request(plan, run_dir, relaunch)
            print(render_dry_run(plan, backend, as_json=args.json, every=args.every,
                                 extra=request.text()))
            return 0
        return _submit(spec, submits, backend.name, plan, run_dir, relaunch, args.root)
    if args.dry_run:
        print(render_dry_run(make_plan(spec, backend, command), backend, as_json=args.json,
                             every=args.every))
        return 0
    backend.prepare()
    plan = make_plan(spec, backend, command, run_id=args.run_id)
    run_dir = os.path.abspath(args.run_dir or default_run_dir(spec, plan.run_id, args.root))
    return _daemon(spec, backend, plan, command, args, run_dir)


def _submit(spec: Spec, submits: Submitter, name: str, plan: JobPlan, run_dir: str,
            relaunch: list[str], root: str | None) -> int:
    from launcher.records.plan_file import write_plan
    from launcher.records.registry import RunState, link_run

    os.makedirs(run_dir, exist_ok=True)
    state = RunState(run_dir, plan.run_id, plan.name, name, max_steps=plan.max_steps,
                     detached=True, spec_path=spec.source, state="queued")
    link_run(run_dir, plan.run_id, root)
    write_plan(run_dir, plan)
    try:
        handle = submits.submit(plan, submits.request(plan, run_dir, relaunch))
    except UsageError as e:
        state.update(state="failed", reason=str(e), status=e.exit_status)
        raise
    state.update(handle=handle, launcher={})
    _announce(plan.run_id, run_dir, f"submitted as {following(name).describe_handle(handle)}", root)
    return 0


def _announce(run_id: str, run_dir: str, how: str, root: str | None) -> None:
    print(f"run {run_id} {how}; run dir {run_dir}")
    for line in follow_commands(run_id, run_dir, root):
        print(f"  {line}")
    sys.stdout.flush()


def _daemon(spec: Spec, backend: Backend, plan: JobPlan, command: list[str] | None,
            args: RunOptions, run_dir: str) -> int:
    """Fork the launcher into a daemon that runs the job; wait for its first word."""
    os.makedirs(run_dir, exist_ok=True)
    args.run_dir = run_dir
    sys.stdout.flush()
    sys.stderr.flush()
    read_end, write_end = os.pipe()
    child = os.fork()
    if child == 0:                                  # pragma: no cover - in the daemon
        os.close(read_end)
        _become_daemon(spec, backend, plan, command, args, run_dir, write_end)
    os.close(write_end)
    os.waitpid(child, 0)                            # the middle process exits at once
    with os.fdopen(read_end, "rb") as pipe:
        word = pipe.read().decode(errors="replace").strip()
    if word.startswith("ready"):
        _announce(plan.run_id, run_dir, f"detached (launcher pid {word.split()[1]})",
                  args.root)
        return 0
    if word.startswith("error"):
        _, status, message = word.split(" ", 2)
        raise UsageError(message) if status == "2" else SystemExit(int(status))
    from launcher.records.registry import RunError, read_state

    try:
        state: dict[str, Any] = read_state(run_dir)
    except RunError:
        state = {}
    if state.get("state") == "succeeded":
        print(f"run {plan.run_id} ended at once: {state.get('reason')}")
        return 0
    print(f"launch: the detached launcher ended before every task started; see "
          f"{os.path.join(run_dir, LAUNCHER_LOG)}", file=sys.stderr)
    return 1


def _become_daemon(spec: Spec, backend: Backend, plan: JobPlan, command: list[str] | None,
                   args: RunOptions, run_dir: str, pipe: int) -> None:
    """In the child: new session, second fork, stdio into launcher.log, run the job."""
    status = 1
    try:
        os.setsid()
        if os.fork():
            os._exit(0)
        log = os.open(os.path.join(run_dir, LAUNCHER_LOG),
                      os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
        null = os.open(os.devnull, os.O_RDONLY)
        os.dup2(null, 0)
        os.dup2(log, 1)
        os.dup2(log, 2)
        os.close(null)
        os.close(log)
        sys.stdin = open(os.devnull)  # noqa: SIM115 - for the process's life
        args.quiet = True

        def ready(_state: object) -> None:
            _say(pipe, f"ready {os.getpid()}")

        from launcher.api import Run
        from launcher.errors import exit_of

        try:
            run = Run.open(spec, backend, plan, command, args, on_running=ready)
            status = run.attach().status
        except BaseException as e:       # noqa: BLE001 - every end is reported
            status, reason = exit_of(e)
            print(f"launch: error: {reason}", file=sys.stderr)
            _say(pipe, f"error {status} {reason}")
    finally:
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(status)


def _say(pipe: int, word: str) -> None:
    try:
        os.write(pipe, word.encode() + b"\n")
        os.close(pipe)
    except OSError:
        pass
