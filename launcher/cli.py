"""`launch SPEC [OPTIONS] [-- COMMAND ARG...]`: run a distributed TensorFlow job.

Exit status: 0 when the job succeeded, 1 when it failed, 2 for bad input (nothing started),
75 when preempted (SIGTERM while training ran: the chief saved first; docs/preemption.md),
128+N when interrupted by signal N.
"""

from __future__ import annotations

import argparse
import atexit
import gc
import importlib
import os
import signal
import sys
import threading
from typing import TYPE_CHECKING

from launcher import __version__
from launcher.errors import Terminated, UsageError, exit_of, own_failure
from launcher.output.pipes import discard, flush_stdout
from launcher.records.crash import crash_line, save_traceback
from launcher.signals import catch

if TYPE_CHECKING:
    from launcher.api import RunOptions

SUBCOMMANDS = {
    "report": "launcher.commands.report",
    "evaluate": "orchestrator.offline_eval",
    "list": "launcher.commands.runs:list_main",
    "status": "launcher.commands.runs:status_main",
    "logs": "launcher.commands.runs:logs_main",
    "cancel": "launcher.commands.runs:cancel_main",
    "tensorboard": "launcher.commands.tensorboard:main",
}


class _Parser(argparse.ArgumentParser):
    def error(self, message: str):
        from launcher.backends.agent.words import shown

        self.print_usage(sys.stderr)
        self.exit(2, f"{self.prog}: error: {shown(message)}\n")


def _parser() -> argparse.ArgumentParser:
    p = _Parser(
        prog="launch",
        description="Run a distributed TensorFlow job (chief, workers, ps, evaluator) from one "
                    "cluster spec: every task gets its TF_CONFIG, the job ends at max_steps, "
                    "every ps is stopped and nothing is left running.",
        epilog="COMMAND after -- replaces the spec's command. Other commands: "
               "'launch report RUN_DIR' draws a run's loss and metrics; "
               "'launch evaluate --model EXPORT_DIR --data FILE' scores an exported model; "
               "'launch list', 'launch status RUN', 'launch logs RUN [TASK] [-f]', "
               "'launch cancel RUN' follow runs, attached or detached; "
               "'launch tensorboard RUN' serves a run's model_dir with TensorBoard.",
    )
    p.add_argument("spec", metavar="SPEC", help="the cluster spec (JSON)")
    p.add_argument("--dry-run", action="store_true",
                   help="print every task's address, TF_CONFIG, environment and command; "
                        "start nothing")
    p.add_argument("--json", action="store_true", help="with --dry-run: one JSON document")
    p.add_argument("--all", action="store_true",
                   help="with --dry-run: every task in full (above 16 tasks it shows the "
                        "first task of each role in full and every address)")
    p.add_argument("--local", action="store_true",
                   help="run on this machine whatever the spec's backend, every host mapped "
                        "to localhost")
    p.add_argument("--run-dir", metavar="DIR",
                   help="where logs, events and the summary go (default: ROOT/RUN_ID, ROOT: "
                        "--root, else the spec's run_dir, else $TFCLUSTER_RUNS, else "
                        ".tfcluster/runs)")
    p.add_argument("--root", metavar="DIR",
                   help="the run root, as for every run command: runs go to DIR/RUN_ID and "
                        "a run kept elsewhere (--run-dir) is listed there (default: "
                        "$TFCLUSTER_RUNS, else .tfcluster/runs)")
    p.add_argument("--quiet", "-q", action="store_true",
                   help="do not stream the tasks' output (it is still kept in the run dir)")
    p.add_argument("--verbose", "-v", action="store_true",
                   help="also print TensorFlow's routine output (deprecation notices, "
                        "banners, INFO lines), which is otherwise only in the task logs")
    p.add_argument("--retrain", action="store_true",
                   help="train even when model_dir already holds a checkpoint at max_steps")
    p.add_argument("--force", action="store_true",
                   help="take model_dir's lease even from a run that cannot be proven gone "
                        "(two live runs on one model_dir lose or mix checkpoints)")
    p.add_argument("--detach", action="store_true",
                   help="start or submit the job and return once it runs or is queued; "
                        "follow it with launch status/logs/cancel RUN")
    # the batch script of a detached Slurm run re-enters here, inside its allocation
    p.add_argument("--run-id", help=argparse.SUPPRESS)
    p.add_argument("--in-allocation", action="store_true", help=argparse.SUPPRESS)
    p.add_argument("--version", action="version", version=f"tfcluster {__version__}")
    return p


def split_command(argv: list[str]) -> tuple[list[str], list[str] | None]:
    """Options before ``--``, the command after it (None when there is no ``--``)."""
    if "--" in argv:
        i = argv.index("--")
        return argv[:i], argv[i + 1:]
    return argv, None


def parse_args(argv: list[str]) -> tuple[RunOptions, list[str] | None]:
    options, command = split_command(argv)
    ns = _parser().parse_args(options)
    if command is not None and not command:
        raise UsageError("nothing after --: give the command to run, or leave out --")
    if ns.json and not ns.dry_run:
        raise UsageError("--json goes with --dry-run")
    if ns.all and not ns.dry_run:
        raise UsageError("--all goes with --dry-run")
    # lazy: `launch --help` loads neither the API nor rich (tests/launcher/test_startup.py)
    from launcher.api import RunOptions

    args = RunOptions(
        spec=ns.spec, local=ns.local, quiet=ns.quiet, verbose=ns.verbose, run_dir=ns.run_dir,
        retrain=ns.retrain, run_id=ns.run_id, detach=ns.detach, force=ns.force,
        root=ns.root, dry_run=ns.dry_run, json=ns.json, every=ns.all,
        in_allocation=ns.in_allocation)
    return args, command


def main(argv: list[str] | None = None) -> int:
    program = argv is None      # the process's own entry (the `launch` script)
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv and argv[0] in SUBCOMMANDS:
        name, _, func = SUBCOMMANDS[argv[0]].partition(":")
        entry = getattr(importlib.import_module(name), func or "main")
        status = _guard(lambda: entry(argv[1:]))
    else:
        status = _guard(lambda: run_cli(argv))
    if program:
        _exit_now(status)
        # the interpreter's exit runs after all: it collects every object once more (~0.1 s
        # of CPU after a job); what lives now lives until the exit, so it is left out
        gc.freeze()
    return status


def _exit_now(status: int) -> None:
    """End the process here when nothing is left for the interpreter's exit to do (no
    thread but daemons, no ``atexit`` callback): its tear-down of ~200 modules cost a small
    job ~20 ms (docs/benchmarks.md). Otherwise return, and the exit runs as usual."""
    if any(not t.daemon for t in threading.enumerate() if t is not threading.main_thread()):
        return
    if getattr(atexit, "_ncallbacks", lambda: 1)():     # CPython's count; unknown: keep
        return
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):   # a closed pipe: the exit would not write it either
            pass
    os._exit(status)


def _terminate(signum, _frame):
    raise Terminated(signum)


def _thread_failed(args: threading.ExceptHookArgs) -> None:
    """A launcher thread's own failure (an output pump, a monitor's probe): one line, its
    traceback saved, never a traceback on the console."""
    if args.exc_value is None or isinstance(args.exc_value, SystemExit):
        return
    name = args.thread.name if args.thread is not None else "a thread"
    line = crash_line(args.exc_value, save_traceback(args.exc_value))
    try:
        print(f"launch: {name}: {line}", file=sys.stderr)
    except (OSError, ValueError):
        pass


def _guard(fn) -> int:
    # Until the job loop installs its own handlers, SIGTERM (and SIGHUP unless ignored:
    # launcher/signals.py) unwinds like Ctrl-C does, so cleanups (probes, allocations,
    # connections) run.
    catch(_terminate, (signal.SIGTERM, signal.SIGHUP))
    threading.excepthook = _thread_failed
    try:
        try:
            return fn()
        finally:            # --help's SystemExit too: a closed pipe is found here
            flush_stdout()
    except BrokenPipeError:     # `launch ... | head`: the reader had what it wanted
        discard()
        return 0
    except (Exception, KeyboardInterrupt) as e:     # launcher.errors.exit_of's status
        status, reason = exit_of(e)
        print(f"launch: {_said(e, reason)}", file=sys.stderr)
        return status


def _said(e: BaseException, reason: str) -> str:
    """The line that ends ``launch`` by ``e``: bad input's words; the launcher's own bug in
    one line, its traceback kept (launcher/records/crash.py)."""
    if isinstance(e, UsageError):
        from launcher.backends.agent.words import shown

        return "error: " + "\n".join(shown(line) for line in reason.split("\n"))
    if isinstance(e, KeyboardInterrupt):
        return "interrupted"
    if own_failure(e):
        return crash_line(e, save_traceback(e))
    return reason


def run_cli(argv: list[str]) -> int:
    args, command = parse_args(argv)
    from launcher import api  # lazy: as in parse_args

    assert args.spec is not None        # SPEC is a required argument
    spec, backend = api.prepare(args.spec, command, local=args.local,
                                inside_job=args.in_allocation)
    if args.detach and not args.in_allocation:
        from launcher.commands.detach import detach  # lazy: --detach only
        return detach(spec, backend, command, args)
    if args.dry_run:
        plan = api.make_plan(spec, backend, command, run_id=args.run_id)
        print(api.render_dry_run(plan, backend, as_json=args.json, every=args.every))
        return 0
    return api.start(spec, backend, command, args).status


if __name__ == "__main__":
    sys.exit(main())
