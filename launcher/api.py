"""The Python API: ``launcher.run(spec)`` runs a job in the calling process and returns its
result; ``launcher.dry_run(spec)`` shows the plan. ``launch`` (launcher/cli.py) is a thin
layer over these two. Bad input raises launcher.errors.UsageError (SpecError,
PreflightError) with the same one-line message the CLI prints; nothing is started then.

    >>> import launcher
    >>> result = launcher.run("cluster_specs/estimator.json", max_steps=300)
    >>> result.status, result.final_step
    (0, 300)
    >>> [(t["task"], t["exit"]) for t in result.tasks]
    [('ps:0', 'stopped (SIGTERM)'), ('chief:0', '0'), ...]
"""

from __future__ import annotations

import dataclasses
import json
import os
import shlex
import threading
from dataclasses import dataclass, field
from functools import partial
from typing import TYPE_CHECKING, Any, Callable, Union

if TYPE_CHECKING:
    from launcher.backends.base import Backend
    from launcher.ending import JobResult
    from launcher.job import Job
    from launcher.monitors import Watch
    from launcher.output.console import Console
    from launcher.plan import JobPlan
    from launcher.records.lease import Holder, Lease
    from launcher.records.registry import RunLog, RunState
    from launcher.records.unwritten import Unwritten
    from launcher.spec import Spec
    from launcher.tracking.target import Target
    from launcher.tracking.tracker import Tracker
    from orchestrator.coordinator import Coordinator, Progress

    SpecLike = Union[str, "os.PathLike[str]", dict[str, Any], Spec]

from launcher.backends import engine, engine_holds
from launcher.errors import LauncherFailed, SpecError, Terminated, UsageError

MAX_PORT_RETRIES = 3


@dataclass
class RunOptions:
    """How to run a job: what ``launch``'s options say (launcher/cli.py builds
    LaunchOptions, these and the dry run's)."""

    spec: str | None = None         # the spec's path, for the run registry
    local: bool = False
    quiet: bool = False
    verbose: bool = False
    run_dir: str | None = None
    retrain: bool = False
    run_id: str | None = None
    detach: bool = False
    force: bool = False             # take model_dir's lease even from a run that may live
    root: str | None = None         # the run root: where runs go and are listed (--root)


@dataclass
class LaunchOptions(RunOptions):
    """Every option of ``launch SPEC``, typed (launcher/cli.py makes it of argparse's
    result): how to run the job and how to show its plan."""

    dry_run: bool = False
    json: bool = False              # --dry-run --json
    every: bool = False             # --dry-run --all: every task in full
    in_allocation: bool = False     # a detached Slurm run's batch script, inside its job


@dataclass
class RunResult:
    """What ``launcher.run`` returns: the launcher's exit status (0 succeeded, 1 failed,
    75 preempted, 128+N interrupted by signal N), why, one row per task, where the run's
    files are, and the step of the newest complete checkpoint."""

    status: int
    reason: str
    run_dir: str
    final_step: int | None = None
    tasks: list[dict[str, Any]] = field(default_factory=list)
    duration: float = 0.0
    run_id: str = ""
    # a preemption notice carried out: the step reached, the step saved, the steps lost
    preemption: dict[str, Any] | None = None

    @property
    def ok(self) -> bool:
        return self.status == 0


def load_spec(path: str, overrides: dict[str, Any] | None = None) -> Spec:
    """A spec file validated against the registered backends (launcher.spec.load_spec)."""
    from launcher import spec
    from launcher.backends import names

    return spec.load_spec(path, overrides, backends=names())


def parse_spec(text: str, source: str | None = None,
               overrides: dict[str, Any] | None = None):
    """JSON text as a Spec, validated against the registered backends."""
    from launcher import spec
    from launcher.backends import names

    return spec.parse_spec(text, source, overrides, backends=names())


def validate(raw: Any, source: str | None = None) -> Spec:
    """A decoded JSON document as a Spec, validated against the registered backends."""
    from launcher import spec
    from launcher.backends import names

    return spec.validate(raw, source, backends=names())


def resolve_spec(spec: SpecLike, overrides: dict[str, Any] | None = None) -> Spec:
    """A Spec from a path, a dict (the JSON document) or a Spec; ``overrides`` replace
    top-level keys and are validated with the rest."""
    from launcher.spec import Spec

    overrides = dict(overrides or {})
    if isinstance(spec, Spec):
        if not overrides:
            return spec
        fields = {f.name for f in dataclasses.fields(Spec)}
        unknown = sorted(set(overrides) - fields)
        if unknown:
            raise SpecError(unknown[0], "is not a field of Spec (pass the spec as a path or "
                                        "a dict to override JSON keys)")
        return dataclasses.replace(spec, **overrides)
    if isinstance(spec, dict):
        return validate({**spec, **overrides})
    if isinstance(spec, (str, os.PathLike)):
        return load_spec(os.fspath(spec), overrides)
    raise UsageError(f"spec must be a path, a dict or a Spec, got {type(spec).__name__}")


def _backend(spec: Spec, local: bool, inside_job: bool = False) -> Backend:
    """The spec's backend (``--local``: the local one, the spec's hosts remapped to this
    machine) built from its options, then told what the job asks of it
    (``Backend.accept``): it never sees the spec. ``inside_job``: the launcher runs inside
    the engine's job (a detached Slurm run's batch script)."""
    from launcher.backends import backend_class
    from launcher.backends.base import PlacesGpus
    from launcher.gpus import check_backend
    from launcher.plan import reservation

    name = "local" if local else spec.backend
    for section, raw in spec.backend_options.items():
        backend_class(section).validate_options(raw, section)
    cls = backend_class(name)
    options = cls.validate_options(spec.backend_options.get(name), name)
    backend = cls(options, remap=local and spec.backend != "local", inside_job=inside_job)
    backend.accept(reservation(spec))
    check_backend(isinstance(backend, PlacesGpus), name, spec.resources)
    return backend


def _check_command(spec: Spec, command: list[str] | None) -> None:
    if command is not None and (not isinstance(command, (list, tuple)) or not command
                                or not all(isinstance(a, str) for a in command)):
        raise UsageError("command must be a non-empty list of strings")
    missing = [r for r in spec.role_names if not spec.command_for(r, command)]
    if missing:
        where = "command" if len(missing) == len(spec.role_names) else \
            f"roles.{missing[0]}.command"
        raise SpecError(where, "no command to run: set \"command\" in the spec or give it "
                               "after --", spec.source)


def prepare(spec: SpecLike, command: list[str] | None = None, *, local: bool = False,
            overrides: dict[str, Any] | None = None,
            inside_job: bool = False) -> tuple[Spec, Backend]:
    """(Spec, backend) for a spec given as path, dict or Spec; bad input raises here."""
    spec = resolve_spec(spec, overrides)
    backend = _backend(spec, local, inside_job)
    _check_command(spec, command)
    tracking_target(spec)
    return spec, backend


def tracking_target(spec: Spec) -> Target | None:
    """Where the run is logged (the spec's ``tracking``, else $MLFLOW_TRACKING_URI), None
    when tracking is off; UsageError (exit 2) for a URI or experiment that cannot work.
    Without either, nothing of launcher/tracking/ is imported."""
    if spec.tracking is None and not os.environ.get("MLFLOW_TRACKING_URI"):
        return None
    from launcher.tracking.target import resolve

    return resolve(spec)


def dry_run(spec: SpecLike, command: list[str] | None = None, *, local: bool = False,
            as_json: bool = False, every: bool = True, **overrides: Any) -> str:
    """Every task's address, TF_CONFIG, environment and expanded command; starts nothing.
    ``every=False``: above 16 tasks, the first task of each role in full and every
    address, as ``launch --dry-run`` prints it."""
    spec, backend = prepare(spec, command, local=local, overrides=overrides)
    return render_dry_run(make_plan(spec, backend, command), backend, as_json=as_json,
                          every=every)


def run(spec: SpecLike, command: list[str] | None = None, *, local: bool = False,
        quiet: bool = False, run_dir: str | None = None, verbose: bool = False,
        retrain: bool = False, force: bool = False, console: Console | None = None,
        **overrides: Any) -> RunResult:
    """Run the job in this process until it ends; see the module docstring."""
    prepared, backend = prepare(spec, command, local=local, overrides=overrides)
    path = os.fspath(spec) if isinstance(spec, (str, os.PathLike)) else None
    options = RunOptions(spec=path, local=local, quiet=quiet, verbose=verbose,
                         run_dir=run_dir, retrain=retrain, force=force)
    return start(prepared, backend, command, options, console)


def start(spec: Spec, backend: Backend, command: list[str] | None, options: RunOptions,
          console: Console | None = None) -> RunResult:
    """The checks of the environment, the backend's resources, the plan, then the run."""
    from launcher.backends.environment import check_fsspec_driver, check_run_dir
    from launcher.records.registry import runs_root

    command = list(command) if command is not None else None
    check_fsspec_driver(spec.model_dir)
    check_run_dir(options.run_dir or options.root or spec.run_dir or runs_root())
    check_lease(spec, options)
    backend.prepare()
    try:
        plan = make_plan(spec, backend, command, run_id=options.run_id)
    except BaseException:
        backend.close()
        raise
    return execute(spec, backend, plan, command, options, console=console)


def check_lease(spec: Spec, options: RunOptions) -> None:
    """Refuse at once (exit 2) when a live run holds model_dir's lease: before an
    allocation is asked for or a daemon started (launcher/records/lease.py)."""
    from launcher.model_dir import resolve
    from launcher.records.lease import check

    check(resolve(spec.model_dir, spec.workdir, spec.env), getattr(options, "run_id", None),
          getattr(options, "force", False), holds=engine_holds)


def make_plan(spec: Spec, backend: Backend, command: list[str] | None,
              run_id: str | None = None) -> JobPlan:
    """The plan, with each task's GPUs where the backend already knows its machines' (ssh
    learns them in its preflight: ``_execute`` places them then). GpuError: over-asked."""
    from launcher.backends.base import gpu_machines
    from launcher.gpus import place
    from launcher.plan import build_plan

    plan = build_plan(spec, port_for=backend.allocate_port, place=backend.place,
                      command=command, run_id=run_id, backend=backend.name,
                      notice=backend.notice,
                      base_env={"TFCLUSTER_RESTART_COUNT": str(engine.attempt(backend))})
    place(plan, gpu_machines(backend, plan))
    return plan


def public_plan(plan: JobPlan) -> dict[str, Any]:
    """The plan as plain data, secrets in the tasks' environments masked: what --dry-run
    prints and plan.json keeps."""
    from launcher.redact import redact_env

    doc = plan.to_dict()
    for task in doc["tasks"]:
        task["env"] = redact_env(task["env"])
    return doc


def render_dry_run(plan: JobPlan, backend: Backend, as_json: bool = False, extra: str | None = None,
                   every: bool = False) -> str:
    """The plan as --dry-run prints it: every task in full up to GROUP_ABOVE tasks (or with
    ``every``, or as JSON); above, the first task of each role in full and every task's
    address (docs/console.md)."""
    from launcher.backends.base import PlacesGpus, gpu_machines
    from launcher.gpus import describe, shown
    from launcher.output.grouped import GROUP_ABOVE
    from launcher.records.lease import dry_run_line

    doc = public_plan(plan)
    tasks = doc["tasks"]
    extra = backend.describe(plan) if extra is None else extra
    lease_line = dry_run_line(plan.storage, plan.run_id, holds=engine_holds)
    if as_json:
        doc["backend"] = backend.name
        doc["lease"] = lease_line
        if extra is not None:
            doc["rendered"] = extra
        return json.dumps(doc, indent=2)
    lines = [f"# job {plan.name}  run {plan.run_id}  backend {backend.name}  "
             f"max_steps {plan.max_steps if plan.max_steps is not None else '(not set)'}",
             f"# model_dir {plan.model_dir}", f"# {lease_line}"]
    marked = backend.ports_picked_at_start and any(t["auto_port"] for t in tasks)
    if marked:
        lines.append("# ports marked 'auto' were picked now and are picked again at start: "
                     "give host:port in the spec to fix them")
    lines += describe(gpu_machines(backend, plan), isinstance(backend, PlacesGpus))
    condensed = not every and len(tasks) > GROUP_ABOVE
    if condensed:
        lines.append(f"# {len(tasks)} tasks: the first of each role in full, then every "
                     "task's address (--dry-run --all: every task in full; --json: all of it)")

    def head(t: dict[str, Any]) -> str:
        auto = "  (auto)" if marked and t["auto_port"] else ""
        gpus = f"  gpus {shown(t['gpus'])}" if t["gpus"] is not None else ""
        return f"{t['type']}:{t['index']}  {t['host']}:{t['port']}{auto}{gpus}"

    seen: set[str] = set()
    for t in tasks:
        if condensed and t["type"] in seen:
            continue
        seen.add(t["type"])
        lines.append(head(t))
        for key, value in t["env"].items():
            lines.append(f"  {key}={shlex.quote(value)}")
        lines.append(f"  command: {shlex.join(t['command'])}")
        if t["cwd"]:
            lines.append(f"  cwd: {t['cwd']}")
    if condensed:
        lines.append("# addresses")
        lines += [head(t) for t in tasks]
    if extra:
        lines += ["", extra]
    return "\n".join(lines)


def default_run_dir(spec: Spec, run_id: str, root: str | None = None) -> str:
    """ROOT/RUN_ID: the root of ``--root``, else the spec's ``run_dir``, else
    $TFCLUSTER_RUNS, else .tfcluster/runs."""
    from launcher.records.registry import runs_root

    return os.path.join(root or spec.run_dir or runs_root(), run_id)


def execute(spec: Spec, backend: Backend, plan: JobPlan, command: list[str] | None,
            args: RunOptions, on_running: Callable[[dict[str, Any]], None] | None = None,
            console: Console | None = None) -> RunResult:
    """Run the job attached; its state goes into the run registry (launcher/records/registry.py);
    ``on_running(state)`` is called once every task started. ``args``: RunOptions, or
    launch's argparse namespace."""
    from launcher.output.terminal import make_console
    from launcher.records.registry import RunLog, open_state

    run_dir = args.run_dir or default_run_dir(spec, plan.run_id, getattr(args, "root", None))
    os.makedirs(run_dir, exist_ok=True)
    state = open_state(run_dir, plan, args, backend=backend.name,
                       handle=engine.run_handle(backend), attempt=engine.attempt(backend),
                       inside_job=backend.inside_job)
    state.on_running = on_running
    console = console or make_console(quiet=args.quiet, verbose=getattr(args, "verbose", False))
    leases: list[Lease] = []        # model_dir's lease, once _execute took it
    attached = Attached(spec, backend, plan, command, args, run_dir,
                        RunLog(os.path.join(run_dir, "events.jsonl"), state), state,
                        console, leases)
    try:
        result = _execute(attached)
    except BaseException as e:
        status, reason = exit_of(e)
        requeued = status > 128 and engine.requeued(backend)
        _release(leases, state, requeued)
        crashed = status == 1 and not isinstance(e, LauncherFailed)
        if crashed:     # the launcher's own bug: one line, the traceback in run_dir
            from launcher.records.crash import crash_line, save_traceback

            reason = crash_line(e, save_traceback(e, run_dir))
        state.finish(status, reason, None, requeued=requeued)
        _end_tracking(attached, status, reason, state)
        if crashed:
            raise LauncherFailed(reason) from e
        raise
    import signal

    from launcher.signals import PREEMPTED, held

    summary = {"status": result.status, "reason": result.reason, "duration": result.duration,
               "tasks": [{k: v for k, v in r.items() if k != "status"} for r in result.tasks],
               **({"preemption": result.preemption} if result.preemption else {})}
    with held(signal.SIGTERM):      # a requeue signals this very batch step: record it first
        requeued = (result.status > 128 and engine.requeued(backend)) or \
            (result.status == PREEMPTED and engine.requeue(backend))
        _release(leases, state, requeued)
        state.finish(result.status, result.reason, summary if result.tasks else None,
                     requeued=requeued, step=result.final_step)
    _end_tracking(attached, result.status, result.reason, state)
    return result


def _start_tracking(run: Attached) -> None:
    """The run's MLflow tracker (launcher/tracking/), when tracking is on: an observer of
    the run's events (queued from now on) on a thread of its own, started once every task
    runs (its imports and requests are not on the way to their start)."""
    target = tracking_target(run.spec)
    if target is None:
        return
    from launcher.tracking.tracker import Tracker

    state = run.state
    fresh = bool(getattr(run.options, "retrain", False)) and not state.doc.get("attempt")
    run.tracker = Tracker(target, run.spec, run.plan, run.run_dir, command=run.command,
                          fresh=fresh, info=run.console.info,
                          record=lambda doc: state.update(tracking=doc),
                          progress=lambda: state.doc.get("progress"))
    run.events.observers.append(run.tracker.on_event)
    state.on_running = _then(run.tracker.start, state.on_running)   # once every task runs


def _end_tracking(run: Attached, status: int, reason: str, state: RunState) -> None:
    """The verdict, the artifacts and the MLflow run's status, once state.json and
    summary.json are final (at most tracker.FINISH_WAIT s)."""
    if run.tracker is None:
        return
    run.tracker.finish(status, str(state.doc.get("state")), reason,
                       getattr(run.options, "spec", None))


def _take_lease(plan: JobPlan, backend: Backend, args: RunOptions, run_dir: str,
                console: Console, events: RunLog, state: RunState) -> Lease:
    """model_dir's lease for this run, heartbeat running (launcher/records/lease.py); a run that
    loses it to a --force says so."""
    from launcher.records.lease import acquire

    def lost(holder: Holder) -> None:
        console.info(f"the model_dir lease was taken by run {holder.run_id} on {holder.host} "
                     "(--force): two runs now write model_dir")
        events.write("lease_lost", run_id=holder.run_id, host=holder.host)

    lease = acquire(plan.storage, plan.run_id, run_dir, getattr(args, "force", False),
                    warn=console.info, backend=backend.name, handle=engine.run_handle(backend),
                    holds=engine_holds)
    lease.start_heartbeat(on_lost=lost)
    state.update(lease=lease.describe())
    return lease


def _release(leases: list[Lease], state: RunState, requeued: bool) -> None:
    """Release the lease (a requeued run keeps it: it comes back under the same run id)."""
    for lease in leases:
        lease.release(keep=requeued)
        try:
            state.update(lease={**lease.describe(), "held": requeued})
        except OSError:
            pass


def exit_of(e: BaseException) -> tuple[int, str]:
    """The exit status and reason of a run that ended by this exception."""
    import signal

    if isinstance(e, UsageError):
        return e.exit_status, str(e)
    if isinstance(e, KeyboardInterrupt):
        return 130, "interrupted by SIGINT"
    if isinstance(e, Terminated):
        return 128 + e.args[0], f"interrupted by {signal.Signals(e.args[0]).name}"
    if isinstance(e, LauncherFailed):
        return 1, str(e)
    return 1, f"launcher error: {e!r}"


@dataclass
class Attached:
    """One run the launcher executes attached: what ``execute`` gathered for ``_execute``."""

    spec: Spec
    backend: Backend
    plan: JobPlan
    command: list[str] | None
    options: RunOptions         # RunOptions, or launch's LaunchOptions
    run_dir: str
    events: RunLog              # the run's events.jsonl
    state: RunState             # its state.json
    console: Console
    leases: list[Lease] = field(default_factory=list)   # model_dir's lease, once taken
    tracker: Tracker | None = None      # the MLflow tracker, when tracking is on


def _execute(run: Attached) -> RunResult:
    """Preflight, run (new ports and again when a task lost its port to a race), then the
    closing summary; the backend is closed whatever happens."""
    spec, backend, plan, command, args = run.spec, run.backend, run.plan, run.command, \
        run.options
    run_dir, events, state, console, leases = run.run_dir, run.events, run.state, \
        run.console, run.leases
    from launcher.backends.base import gpu_machines
    from launcher.gpus import place
    from launcher.job import Job, PortConflict
    from launcher.records.unwritten import Unwritten
    from launcher.tensorboard import with_run

    unwritten = Unwritten(console.info)     # what a full or vanished run_dir did not get
    events.on_error = partial(unwritten.failed, "events.jsonl")
    state.on_error = partial(unwritten.failed, "state.json")
    board = None
    record: PlanFile | None = None
    try:
        plan.run_dir = run_dir
        backend.preflight(plan)
        for note in backend.preflight_notes:
            console.info(note)
        place(plan, gpu_machines(backend, plan))
        from launcher.backends.storage_check import preflight_model_dir
        if preflight_model_dir(plan, backend, args.retrain, console, events):
            return RunResult(0, "model_dir already holds a checkpoint at max_steps", run_dir,
                             run_id=plan.run_id)
        leases.append(_take_lease(plan, backend, args, run_dir, console, events, state))
        _start_tracking(run)
        record = PlanFile(run_dir, plan, on_error=partial(unwritten.failed, "plan.json"))
        state.on_running = _then(record.write, state.on_running)
        board = with_run(plan, backend, run_dir, console,
                         lambda doc: state.update(tensorboard=doc))
        if board is not None:       # started once every task runs, outside the job
            state.on_running = _then(board.start, state.on_running)
        for attempt in range(MAX_PORT_RETRIES + 1):
            watch = JobWatch(plan, backend, console, events)
            job = Job(plan, backend, run_dir, console, events=events, watch=watch,
                      unwritten=unwritten, cancelled=partial(cancelled, run_dir))
            state.attach(job.snapshot)
            try:
                result = job.run()
                break
            except PortConflict as e:
                if attempt == MAX_PORT_RETRIES:
                    raise
                console.info(f"{e}; picking new ports and starting again")
                events.write("port_conflict", message=str(e))
                plan = make_plan(spec, backend, command, run_id=plan.run_id)
                record.replan(plan)
    finally:
        if record is not None:
            record.write()      # a job that ended before every task started
        if board is not None:      # stopped with the tasks, before the backend closes
            board.stop()
        console.close()
        backend.close()
    run.plan = plan     # re-planned after a port conflict
    return _close(run, result, job, watch, unwritten)


def _close(run: Attached, result: JobResult, job: Job, watch: JobWatch,
           unwritten: Unwritten) -> RunResult:
    """The closing summary of a job that ran: one last read of model_dir, the verdict, the
    task table, the closing lines and metrics, summary.json."""
    from launcher.ending import TrainingView, own_evaluations
    from launcher.output.summary import (
        closing_lines,
        ended_words,
        summary_doc,
        summary_table,
        task_rows,
        verdict,
    )
    from orchestrator.roles import TRAINERS

    spec, plan, run_dir, events, console = run.spec, run.plan, run.run_dir, run.events, \
        run.console
    result.unwritten = unwritten.lines()   # the pumps have drained every task by now
    unwritten.job_over = True
    from launcher.output.closing import final_read
    closing = final_read(plan.storage.reader(), plan.max_steps,
                         any(t.type == "evaluator" for t in plan.tasks), spec.epochs,
                         [t.log for t in result.tasks if t.type in TRAINERS],
                         plan.model_dir, result.training_finished,
                         watch.progress().evaluated_step)
    closing.evaluated_step = own_evaluations(
        TrainingView(evaluated_step=closing.evaluated_step), job.snapshot()).evaluated_step
    if result.preemption is not None:
        result.preemption = preempted_at(result.preemption, watch.progress(), closing)
    if result.save_request is not None:
        shown = console.steps.newest()
        if not result.save_request.get("saved"):    # what training lost: the steps reached
            result.save_request = preempted_at(     # past the newest checkpoint
                result.save_request, watch.progress(), closing,
                result.save_request.get("step_seen"), shown.step if shown else None)
    short = verdict(result, closing)
    if short:
        result = dataclasses.replace(result, status=1, reason=short)
        events.write("verdict", status=1, reason=short)
    rows = task_rows(result.tasks)
    table = summary_table(rows, os.path.join(run_dir, "summary.json"))
    console.info(f"job {ended_words(result.status)} after {result.duration:.1f}s: "
                 f"{result.reason}\n{table}")
    for line in closing_lines(result, closing):
        console.info(line)
    from launcher.output.metrics_table import metrics_table
    metrics = metrics_table(plan.storage)
    if metrics:
        console.info(f"metrics of each checkpoint, evaluated afresh:\n{metrics}")
    if console.hidden:
        console.info(f"{console.hidden} lines of TensorFlow's routine output (deprecation "
                     "notices, banners, INFO, TensorBoard's routine lines) are only in the "
                     "task logs; --verbose shows them")
    from launcher.records.registry import write_json_atomic
    from launcher.signals import PREEMPTED
    known = None
    if result.status not in (0, PREEMPTED) and result.status < 128:
        from launcher.output.known_failures import known_of
        known = known_of(result.tasks)
    try:
        write_json_atomic(os.path.join(run_dir, "summary.json"),
                          summary_doc(result, closing, rows, known))
    except OSError as e:
        unwritten.failed("summary.json", e)
    seen = watch.progress()
    final = closing.final_step if closing.final_step is not None else \
        seen.step if seen.step is not None else seen.latest_step
    return RunResult(result.status, result.reason, run_dir, final, rows,
                     round(result.duration, 3), plan.run_id, result.preemption)


def cancelled(run_dir: str) -> bool:
    """The SIGTERM came from ``launch cancel`` (it leaves its file first)."""
    from launcher.records.registry import CANCEL_FILE

    return os.path.exists(os.path.join(run_dir, CANCEL_FILE))


def preempted_at(notice: dict[str, Any], seen: Progress, closing: Any,
                 *more: int | None) -> dict[str, Any]:
    """The notice's record with the step training reached (the newest the coordinator saw,
    events or checkpoint, or ``more``: the trainers' output), the newest complete
    checkpoint's after the stop, and the steps lost between the two."""
    from launcher.ending import summary

    steps = [s for s in (seen.latest_step, seen.step, closing.final_step, *more)
             if s is not None]
    return {**notice, **summary(max(steps) if steps else None, closing.final_step)}


def _then(first: Callable[[], None], then: Callable[[dict[str, Any]], None] | None
          ) -> Callable[[dict[str, Any]], None]:
    """on_running: ``first()``, then ``then(doc)`` when there is one."""
    def both(doc: dict[str, Any]) -> None:
        first()
        if then is not None:
            then(doc)
    return both


class JobWatch:
    """What watches a job (launcher.monitors.Watch), built when the job loop calls, once
    its tasks started (reading model_dir is not on the way to their start): the
    coordinator over model_dir, the whole-job deadline (``timeouts.job``) and, where the
    backend reaches the tasks, the liveness probe of their TF servers (also the job's
    readiness). ``progress()``: what the coordinator saw last."""

    def __init__(self, plan: JobPlan, backend: Backend, console: Console, events: RunLog):
        self.plan, self.backend, self.console, self.events = plan, backend, console, events
        self.coordinator: Coordinator | None = None

    def __call__(self) -> Watch:
        from launcher.monitors import Watch
        from launcher.monitors.coordinator import CoordinatorMonitor
        from launcher.monitors.deadline import deadline_monitor
        from launcher.monitors.liveness import liveness_monitor
        from orchestrator.coordinator import Coordinator

        t = self.plan.timeouts
        self.coordinator = Coordinator(self.plan.storage.url, max_steps=self.plan.max_steps,
                                       poll=t["poll"], stall=t["stall"], startup=t["start"],
                                       reader=self.plan.storage.reader())
        liveness = liveness_monitor(self.plan, self.backend, self.events)
        adapter = CoordinatorMonitor(self.coordinator, self.console, self.events,
                                     not_answering=liveness.not_answering if liveness else None,
                                     evaluator_timeout=t["evaluator"],
                                     on_progress=self.events.state.record_progress)
        return Watch([adapter, *deadline_monitor(t), *([liveness] if liveness else [])],
                     readiness=liveness, training=adapter.training_view)

    def progress(self) -> Progress:
        """The coordinator's last view of model_dir (an empty one if it never ran)."""
        from orchestrator.coordinator import Progress

        return self.coordinator.progress() if self.coordinator is not None else Progress()


class PlanFile:
    """plan.json of a run, written once every task started (``write``, the run state's
    ``on_running``), or at the end of a job that ended first: 1,000 tasks' plan is ~20 MB
    of JSON, not on the way to their start. ``replan``: new ports, written at once."""

    def __init__(self, run_dir: str, plan: JobPlan, on_error: Callable[[OSError], None]):
        self.run_dir, self.plan, self.written = run_dir, plan, False
        self.on_error = on_error
        self._lock = threading.Lock()

    def write(self) -> None:
        with self._lock:
            if not self.written:
                self.written = True
                self._write()

    def replan(self, plan: JobPlan) -> None:
        with self._lock:
            self.plan = plan
            if self.written:
                self._write()

    def _write(self) -> None:
        try:
            write_plan(self.run_dir, self.plan)
        except OSError as e:    # a full or vanished run_dir: said once, the job goes on
            self.on_error(e)


def write_plan(run_dir: str, plan: JobPlan) -> None:
    """plan.json: a task per line (json's C encoder; with an indent, 1,000 tasks of 1,000
    addresses each took seconds before the first start)."""
    from launcher.records.registry import json_pieces

    with open(os.path.join(run_dir, "plan.json"), "w", encoding="utf-8") as f:
        f.writelines(json_pieces(public_plan(plan)))
