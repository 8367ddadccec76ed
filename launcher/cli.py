"""`launch SPEC [OPTIONS] [-- COMMAND ARG...]`: run a distributed TensorFlow job.

Exit status: 0 when the job succeeded, 1 when it failed, 2 for bad input (nothing started),
128+N when interrupted by signal N.
"""

from __future__ import annotations

import argparse
import importlib
import json
import os
import shlex
import signal
import sys
from typing import Any

from launcher.errors import UsageError

SUBCOMMANDS = {
    "report": "launcher.output.report",
    "evaluate": "orchestrator.offline_eval",
    "list": "launcher.run_commands:list_main",
    "status": "launcher.run_commands:status_main",
    "logs": "launcher.run_commands:logs_main",
    "cancel": "launcher.run_commands:cancel_main",
}
MAX_PORT_RETRIES = 3


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="launch",
        description="Run a distributed TensorFlow job (chief, workers, ps, evaluator) from one "
                    "cluster spec: every task gets its TF_CONFIG, the job ends at max_steps, "
                    "every ps is stopped and nothing is left running.",
        epilog="COMMAND after -- replaces the spec's command. Other commands: "
               "'launch report RUN_DIR' draws a run's loss and metrics; "
               "'launch evaluate --model EXPORT_DIR --data FILE' scores an exported model; "
               "'launch list', 'launch status RUN', 'launch logs RUN [TASK] [-f]', "
               "'launch cancel RUN' follow runs, attached or detached.",
    )
    p.add_argument("spec", metavar="SPEC", help="the cluster spec (JSON)")
    p.add_argument("--dry-run", action="store_true",
                   help="print every task's address, TF_CONFIG, environment and command; "
                        "start nothing")
    p.add_argument("--json", action="store_true", help="with --dry-run: one JSON document")
    p.add_argument("--local", action="store_true",
                   help="run on this machine whatever the spec's backend, every host mapped "
                        "to localhost")
    p.add_argument("--run-dir", metavar="DIR",
                   help="where logs, events and the summary go (default: spec's run_dir, "
                        "else .tfcluster/runs/RUN_ID)")
    p.add_argument("--quiet", "-q", action="store_true",
                   help="do not stream the tasks' output (it is still kept in the run dir)")
    p.add_argument("--retrain", action="store_true",
                   help="train even when model_dir already holds a checkpoint at max_steps")
    p.add_argument("--detach", action="store_true",
                   help="start or submit the job and return once it runs or is queued; "
                        "follow it with launch status/logs/cancel RUN")
    # the batch script of a detached Slurm run re-enters here, inside its allocation
    p.add_argument("--run-id", help=argparse.SUPPRESS)
    p.add_argument("--in-allocation", action="store_true", help=argparse.SUPPRESS)
    p.add_argument("--version", action="version", version="tfcluster 0.1.0")
    return p


def split_command(argv: list[str]) -> tuple[list[str], list[str] | None]:
    """Options before ``--``, the command after it (None when there is no ``--``)."""
    if "--" in argv:
        i = argv.index("--")
        return argv[:i], argv[i + 1:]
    return argv, None


def parse_args(argv: list[str]) -> tuple[argparse.Namespace, list[str] | None]:
    options, command = split_command(argv)
    args = _parser().parse_args(options)
    if command is not None and not command:
        raise UsageError("nothing after --: give the command to run, or leave out --")
    if args.json and not args.dry_run:
        raise UsageError("--json goes with --dry-run")
    return args, command


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv and argv[0] in SUBCOMMANDS:
        name, _, func = SUBCOMMANDS[argv[0]].partition(":")
        entry = getattr(importlib.import_module(name), func or "main")
        return _guard(lambda: entry(argv[1:]))
    return _guard(lambda: run_cli(argv))


class Terminated(Exception):
    """SIGTERM or SIGHUP before the job loop took over the signals (checks, probes)."""


def _terminate(signum, _frame):
    raise Terminated(signum)


def _guard(fn) -> int:
    # Until the job loop installs its own handlers, SIGTERM unwinds like Ctrl-C does, so
    # cleanups (probes, allocations, connections) run.
    for sig in (signal.SIGTERM, signal.SIGHUP):
        signal.signal(sig, _terminate)
    try:
        return fn()
    except UsageError as e:
        print(f"launch: error: {e}", file=sys.stderr)
        return e.exit_status
    except KeyboardInterrupt:
        print("launch: interrupted", file=sys.stderr)
        return 130
    except Terminated as e:
        print(f"launch: interrupted by {signal.Signals(e.args[0]).name}", file=sys.stderr)
        return 128 + e.args[0]


def run_cli(argv: list[str]) -> int:
    from launcher.backends import backend_class
    from launcher.errors import SpecError
    from launcher.spec import load_spec

    args, command = parse_args(argv)
    spec = load_spec(args.spec)
    backend_name = "local" if args.local else spec.backend
    for section, raw in spec.backend_options.items():
        backend_class(section).validate_options(raw, section)
    cls = backend_class(backend_name)
    backend = cls(spec, cls.validate_options(spec.backend_options.get(backend_name), backend_name))
    if not (command or spec.command):
        raise SpecError("command", "no command to run: set \"command\" in the spec or give it "
                                   "after --", spec.source)
    if args.detach and not args.in_allocation:
        from launcher.detach import detach
        return detach(spec, backend, command, args)
    backend.inside_job = args.in_allocation
    if not args.dry_run:
        backend.prepare()
    plan = make_plan(spec, backend, command, run_id=args.run_id)
    if args.dry_run:
        print(render_dry_run(plan, backend, as_json=args.json))
        return 0
    return execute(spec, backend, plan, command, args)


def make_plan(spec, backend, command, run_id: str | None = None):
    from launcher.plan import build_plan

    return build_plan(spec, port_for=backend.allocate_port, host_for=backend.host_for,
                      command=command, run_id=run_id, backend=backend.name,
                      base_env={"TFCLUSTER_RESTART_COUNT": str(backend.attempt())})


def public_plan(plan) -> dict[str, Any]:
    """The plan as plain data, secrets in the tasks' environments masked: what --dry-run
    prints and plan.json keeps."""
    from launcher.redact import redact_env

    doc = plan.to_dict()
    for task in doc["tasks"]:
        task["env"] = redact_env(task["env"])
    return doc


def render_dry_run(plan, backend, as_json: bool = False, extra: str | None = None) -> str:
    doc = public_plan(plan)
    tasks = doc["tasks"]
    extra = backend.describe(plan) if extra is None else extra
    if as_json:
        doc["backend"] = backend.name
        if extra is not None:
            doc["rendered"] = extra
        return json.dumps(doc, indent=2)
    lines = [f"# job {plan.name}  run {plan.run_id}  backend {backend.name}  "
             f"max_steps {plan.max_steps if plan.max_steps is not None else '(not set)'}",
             f"# model_dir {plan.model_dir}"]
    for t in tasks:
        lines.append(f"{t['type']}:{t['index']}  {t['host']}:{t['port']}")
        for key, value in t["env"].items():
            lines.append(f"  {key}={shlex.quote(value)}")
        lines.append(f"  command: {shlex.join(t['command'])}")
        if t["cwd"]:
            lines.append(f"  cwd: {t['cwd']}")
    if extra:
        lines += ["", extra]
    return "\n".join(lines)


def default_run_dir(spec, run_id: str) -> str:
    from launcher.runs import runs_root

    return os.path.join(spec.run_dir or runs_root(), run_id)


def execute(spec, backend, plan, command, args, on_running=None) -> int:
    """Run the job attached; its state goes into the run registry (launcher/runs.py);
    ``on_running(state)`` is called once every task started."""
    from launcher.runs import RunLog, open_state

    run_dir = args.run_dir or default_run_dir(spec, plan.run_id)
    os.makedirs(run_dir, exist_ok=True)
    state = open_state(run_dir, plan, backend, args)
    state.on_running = on_running
    try:
        status, reason, summary = _execute(spec, backend, plan, command, args, run_dir,
                                           RunLog(os.path.join(run_dir, "events.jsonl"), state),
                                           state)
    except BaseException as e:
        status, reason = _exit_of(e)
        state.finish(status, reason, None, requeued=status > 128 and backend.requeued())
        raise
    state.finish(status, reason, summary, requeued=status > 128 and backend.requeued())
    return status


def _exit_of(e: BaseException) -> tuple[int, str]:
    """The exit status and reason of a run that ended by this exception."""
    if isinstance(e, UsageError):
        return e.exit_status, str(e)
    if isinstance(e, KeyboardInterrupt):
        return 130, "interrupted by SIGINT"
    if isinstance(e, Terminated):
        return 128 + e.args[0], f"interrupted by {signal.Signals(e.args[0]).name}"
    return 1, f"launcher error: {e!r}"


def _execute(spec, backend, plan, command, args, run_dir, events, state):
    from launcher.job import Job, PortConflict
    from launcher.output.console import Console
    from launcher.output.summary import summary_table

    console = Console(quiet=args.quiet)
    try:
        backend.preflight(plan)
        from launcher.storage_check import preflight_model_dir
        if preflight_model_dir(plan, backend, args.retrain, console, events):
            return 0, "model_dir already holds a checkpoint at max_steps", None
        _write_plan(run_dir, plan)
        for attempt in range(MAX_PORT_RETRIES + 1):
            job = Job(plan, backend, run_dir, console, events=events)
            state.attach(job)
            try:
                result = job.run()
                break
            except PortConflict as e:
                if attempt == MAX_PORT_RETRIES:
                    raise
                console.info(f"{e}; picking new ports and starting again")
                events.write("port_conflict", message=str(e))
                plan = make_plan(spec, backend, command, run_id=plan.run_id)
                _write_plan(run_dir, plan)
    finally:
        backend.close()
    table = summary_table(result.runs)
    verdict = "succeeded" if result.status == 0 else f"FAILED (exit status {result.status})"
    console.info(f"job {verdict} after {result.duration:.1f}s: {result.reason}\n{table}")
    from launcher.output.metrics_table import metrics_table
    metrics = metrics_table(plan.storage)
    if metrics:
        console.info(f"metrics of each checkpoint, evaluated afresh:\n{metrics}")
    summary = {"status": result.status, "reason": result.reason,
               "duration": round(result.duration, 3),
               "tasks": [{"task": r.name, "address": r.task.address, "exit": r.status,
                          "stopped": r.stopped, "restarts": r.restarts,
                          "duration": round(r.duration(), 3), "log": r.log_path}
                         for r in result.runs]}
    with open(os.path.join(run_dir, "summary.json"), "w", encoding="utf-8") as f:
        json.dump(summary, f, indent=2)
    return result.status, result.reason, summary


def _write_plan(run_dir: str, plan) -> None:
    with open(os.path.join(run_dir, "plan.json"), "w", encoding="utf-8") as f:
        json.dump(public_plan(plan), f, indent=2)


if __name__ == "__main__":
    sys.exit(main())
