"""The Python API (docs/python.md): ``launcher.run(spec)`` runs a job in the calling
process and returns its result; ``launcher.dry_run(spec)`` shows the plan; ``launch``
(launcher/cli.py) is a thin layer over both. Bad input raises launcher.errors.UsageError with
the line the CLI prints; nothing is started then. The composition root: the backend, the
plan, the monitors and the job loop are built here (``Run``), and nowhere else.
"""

from __future__ import annotations

import dataclasses
import os
import signal
from dataclasses import dataclass, field
from functools import partial
from typing import TYPE_CHECKING, Any, Callable, Union

from launcher import spec as specs
from launcher.backends import backend_class, engine, engine_holds, names
from launcher.backends.base import PlacesGpus, gpu_machines
from launcher.backends.environment import check_fsspec_driver, check_run_dir
from launcher.errors import LauncherFailed, SpecError, UsageError, exit_of, own_failure
from launcher.gpus import check_backend, describe, place
from launcher.model_dir import resolve as resolve_model_dir
from launcher.output.dry_run import DryRun, dry_run_text
from launcher.plan import build_plan, reservation
from launcher.records import lease as leases
from launcher.records.crash import crash_line, save_traceback
from launcher.records.plan_file import public_plan
from launcher.records.registry import CANCEL_FILE, open_state, runs_root, write_json_atomic
from launcher.records.run_record import RunRecord
from launcher.signals import PREEMPTED, held

if TYPE_CHECKING:
    from launcher.backends.base import Backend
    from launcher.ending import JobResult
    from launcher.job import Job
    from launcher.monitors import Watch
    from launcher.output.console import Console
    from launcher.plan import JobPlan
    from launcher.spec import Spec
    from launcher.tracking.target import Target
    from launcher.tracking.tracker import Tracker
    from orchestrator.coordinator import Coordinator

    SpecLike = Union[str, "os.PathLike[str]", dict[str, Any], Spec]

MAX_PORT_RETRIES = 3


@dataclass
class RunOptions:
    """Every option of ``launch SPEC``, typed (launcher/cli.py makes it of argparse's
    result; ``launcher.run`` of its keywords): how to run the job, how to show its plan."""

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
    dry_run: bool = False
    json: bool = False              # --dry-run --json
    every: bool = False             # --dry-run --all: every task in full
    in_allocation: bool = False     # a detached Slurm run's batch script, inside its job


@dataclass
class RunResult:
    """What ``launcher.run`` returns: the exit status (0, 1 failed, 75 preempted, 128+N
    signal N), why, a row per task, the run's files, the newest complete checkpoint's step."""

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
    return specs.load_spec(path, overrides, backends=names())


def parse_spec(text: str, source: str | None = None,
               overrides: dict[str, Any] | None = None) -> Spec:
    """JSON text as a Spec, validated against the registered backends."""
    return specs.parse_spec(text, source, overrides, backends=names())


def validate(raw: Any, source: str | None = None) -> Spec:
    """A decoded JSON document as a Spec, validated against the registered backends."""
    return specs.validate(raw, source, backends=names())


def resolve_spec(spec: SpecLike, overrides: dict[str, Any] | None = None) -> Spec:
    """A Spec from a path, a dict (the JSON document) or a Spec; ``overrides`` replace
    top-level keys and are validated with the rest."""
    overrides = dict(overrides or {})
    if isinstance(spec, specs.Spec):
        if not overrides:
            return spec
        fields = {f.name for f in dataclasses.fields(specs.Spec)}
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
    """The spec's backend (``--local``: the local one, hosts remapped here), built from its
    options, told what the job asks (``accept``): it never sees the spec. ``inside_job``:
    the launcher runs inside the engine's job (a detached Slurm run's batch script)."""
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
    when tracking is off; UsageError (exit 2) for a URI or experiment that cannot work."""
    if spec.tracking is None and not os.environ.get("MLFLOW_TRACKING_URI"):
        return None
    # lazy: without tracking, nothing of launcher/tracking/ is imported (docs/tracking.md)
    from launcher.tracking.target import resolve

    return resolve(spec)


def dry_run(spec: SpecLike, command: list[str] | None = None, *, local: bool = False,
            as_json: bool = False, every: bool = True, **overrides: Any) -> str:
    """Every task's address, TF_CONFIG, environment and expanded command; starts nothing.
    ``every=False``: above 16 tasks, as ``launch --dry-run`` (docs/console.md)."""
    spec, backend = prepare(spec, command, local=local, overrides=overrides)
    return render_dry_run(make_plan(spec, backend, command), backend, as_json=as_json,
                          every=every)


def run(spec: SpecLike, command: list[str] | None = None, *, local: bool = False,
        quiet: bool = False, run_dir: str | None = None, verbose: bool = False,
        retrain: bool = False, force: bool = False, console: Console | None = None,
        **overrides: Any) -> RunResult:
    """Run the job in this process until it ends (docs/python.md)."""
    prepared, backend = prepare(spec, command, local=local, overrides=overrides)
    path = os.fspath(spec) if isinstance(spec, (str, os.PathLike)) else None
    options = RunOptions(spec=path, local=local, quiet=quiet, verbose=verbose,
                         run_dir=run_dir, retrain=retrain, force=force)
    return start(prepared, backend, command, options, console)


def start(spec: Spec, backend: Backend, command: list[str] | None, options: RunOptions,
          console: Console | None = None) -> RunResult:
    """The checks of the environment, the backend's resources, the plan, then the run."""
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
    return Run.open(spec, backend, plan, command, options, console=console).attach()


def check_lease(spec: Spec, options: RunOptions) -> None:
    """Exit 2 at once when a live run holds model_dir's lease: before an allocation is
    asked for or a daemon started."""
    leases.check(resolve_model_dir(spec.model_dir, spec.workdir, spec.env), options.run_id,
                 options.force, holds=engine_holds)


def make_plan(spec: Spec, backend: Backend, command: list[str] | None,
              run_id: str | None = None) -> JobPlan:
    """The plan, with each task's GPUs where the backend already knows its machines' (ssh
    learns them in its preflight: ``Run`` places them then). GpuError: over-asked."""
    plan = build_plan(spec, port_for=backend.allocate_port, place=backend.place,
                      command=command, run_id=run_id, backend=backend.name,
                      notice=backend.notice,
                      base_env={"TFCLUSTER_RESTART_COUNT": str(engine.attempt(backend))})
    place(plan, gpu_machines(backend, plan))
    return plan


def render_dry_run(plan: JobPlan, backend: Backend, as_json: bool = False,
                   extra: str | None = None, every: bool = False) -> str:
    """The plan as --dry-run prints it (launcher/output/dry_run.py), gathered here; the
    backend's own text: ``extra``, else its ``describe``."""
    view = DryRun(public_plan(plan), backend.name,
                  leases.dry_run_line(plan.storage, plan.run_id, holds=engine_holds),
                  describe(gpu_machines(backend, plan), isinstance(backend, PlacesGpus)),
                  backend.ports_picked_at_start,
                  backend.describe(plan) if extra is None else extra)
    return dry_run_text(view, as_json=as_json, every=every)


def default_run_dir(spec: Spec, run_id: str, root: str | None = None) -> str:
    """ROOT/RUN_ID: the root of ``--root``, else the spec's ``run_dir``, else
    $TFCLUSTER_RUNS, else .tfcluster/runs."""
    return os.path.join(root or spec.run_dir or runs_root(), run_id)


@dataclass
class Run:
    """One run the launcher executes attached: ``open`` (its directory's records),
    ``attach`` (the job until it ends), ``close`` (its closing summary)."""

    spec: Spec
    backend: Backend
    plan: JobPlan
    command: list[str] | None
    options: RunOptions
    record: RunRecord           # state.json, events.jsonl, plan.json, model_dir's lease
    console: Console
    tracker: Tracker | None = None      # the MLflow tracker, when tracking is on
    coordinator: Coordinator | None = None  # the job's, once ``watch`` built it

    @classmethod
    def open(cls, spec: Spec, backend: Backend, plan: JobPlan, command: list[str] | None,
             options: RunOptions, on_running: Callable[[dict[str, Any]], None] | None = None,
             console: Console | None = None) -> Run:
        """The run's directory and state; ``on_running(state)``: once every task started."""
        run_dir = options.run_dir or default_run_dir(spec, plan.run_id, options.root)
        os.makedirs(run_dir, exist_ok=True)
        state = open_state(run_dir, plan, backend=backend.name, handle=engine.run_handle(backend),
                           spec_path=options.spec, root=options.root, detached=options.detach,
                           attempt=engine.attempt(backend), inside_job=backend.inside_job)
        state.on_running = on_running
        if console is None:
            # lazy, as every run-only import here: off --dry-run (bench/lazy_imports.py)
            from launcher.output.terminal import make_console

            console = make_console(quiet=options.quiet, verbose=options.verbose)
        return cls(spec, backend, plan, command, options,
                   RunRecord(run_dir, state, console.info), console)

    def attach(self) -> RunResult:
        """Run the job until it ends; then, whatever happens, state.json's end, the lease
        released (a requeued run keeps it) and the MLflow run's end."""
        try:
            result = self._execute()
        except BaseException as e:
            status, reason = exit_of(e)
            if own_failure(e):     # the launcher's bug: one line, the traceback in run_dir
                reason = crash_line(e, save_traceback(e, self.record.run_dir))
            self.record.finish(status, reason, status > 128 and engine.requeued(self.backend))
            self._end_tracking(status, reason)
            if own_failure(e):
                raise LauncherFailed(reason) from e
            raise
        summary = {"status": result.status, "reason": result.reason, "duration": result.duration,
                   "tasks": [{k: v for k, v in r.items() if k != "status"} for r in result.tasks],
                   **({"preemption": result.preemption} if result.preemption else {})}
        with held(signal.SIGTERM):      # a requeue signals this very batch step: record it
            requeued = (result.status > 128 and engine.requeued(self.backend)) or \
                (result.status == PREEMPTED and engine.requeue(self.backend))
            self.record.finish(result.status, result.reason, requeued,
                               summary if result.tasks else None, result.final_step)
        self._end_tracking(result.status, result.reason)
        return result

    def _execute(self) -> RunResult:
        """Preflight, the job (again, on new ports, after a port lost to a race), the
        closing summary; the backend closed whatever happens."""
        # lazy: run-only, off --dry-run and --detach's submission (bench/lazy_imports.py)
        from launcher.backends.storage_check import preflight_model_dir
        from launcher.job import Job, PortConflict
        from launcher.tensorboard import with_run

        backend, plan, console, record = self.backend, self.plan, self.console, self.record
        run_dir, events, state = record.run_dir, record.events, record.state
        board = plans = None
        try:
            plan.run_dir = run_dir
            backend.preflight(plan)
            for note in backend.preflight_notes:
                console.info(note)
            place(plan, gpu_machines(backend, plan))
            if preflight_model_dir(plan, backend, self.options.retrain, console, events):
                return RunResult(0, "model_dir already holds a checkpoint at max_steps",
                                 run_dir, run_id=plan.run_id)
            record.take_lease(plan.storage, plan.run_id, self.options.force,
                              backend=backend.name, handle=engine.run_handle(backend),
                              holds=engine_holds)
            self._start_tracking()
            plans = record.plan_file(plan)
            state.on_running = _then(plans.write, state.on_running)
            board = with_run(plan, backend, run_dir, console,
                             lambda doc: state.update(tensorboard=doc))
            if board is not None:       # started once every task runs, outside the job
                state.on_running = _then(board.start, state.on_running)
            for attempt in range(MAX_PORT_RETRIES + 1):
                self.coordinator = None
                job = Job(plan, backend, run_dir, console, events=events, watch=self.watch,
                          unwritten=record.unwritten, cancelled=partial(cancelled, run_dir))
                state.attach(job.snapshot)
                try:
                    result = job.run()
                    break
                except PortConflict as e:
                    if attempt == MAX_PORT_RETRIES:
                        raise
                    console.info(f"{e}; picking new ports and starting again")
                    events.write("port_conflict", message=str(e))
                    plan = self.plan = make_plan(self.spec, backend, self.command,
                                                 run_id=plan.run_id)
                    plans.replan(plan)
        finally:
            if plans is not None:
                plans.write()       # a job that ended before every task started
            if board is not None:      # stopped with the tasks, before the backend closes
                board.stop()
            console.close()
            backend.close()
        return self.close(result, job)

    def close(self, result: JobResult, job: Job) -> RunResult:
        """The closing summary (launcher/output/closing_report.py) and summary.json."""
        # lazy: run-only (bench/lazy_imports.py)
        from launcher.output.closing_report import last_read, report, settle
        from orchestrator.coordinator import Progress

        plan, console, run_dir, unwritten = self.plan, self.console, self.record.run_dir, \
            self.record.unwritten
        result.unwritten = unwritten.lines()   # the pumps have drained every task by now
        unwritten.job_over = True
        seen = self.coordinator.progress() if self.coordinator else Progress()  # empty: never ran
        closing = last_read(result, plan, self.spec.epochs, seen, job.snapshot())
        shown = console.steps.newest()
        short = settle(result, closing, seen, shown.step if shown else None)
        if short:
            result = dataclasses.replace(result, status=1, reason=short)
            self.record.events.write("verdict", status=1, reason=short)
        rows, doc = report(result, closing, plan.storage, console, run_dir)
        try:
            write_json_atomic(os.path.join(run_dir, "summary.json"), doc)
        except OSError as e:
            unwritten.failed("summary.json", e)
        final = closing.final_step if closing.final_step is not None else \
            seen.step if seen.step is not None else seen.latest_step
        return RunResult(result.status, result.reason, run_dir, final, rows,
                         round(result.duration, 3), plan.run_id, result.preemption)

    def watch(self) -> Watch:
        """The job's monitors (launcher.monitors.Watch), built when the job loop calls once
        its tasks started: the coordinator over model_dir, the deadline (``timeouts.job``)
        and, where the backend reaches the tasks, the liveness probe (also the readiness)."""
        # lazy: run-only (bench/lazy_imports.py)
        from launcher.monitors import Watch
        from launcher.monitors.coordinator import CoordinatorMonitor
        from launcher.monitors.deadline import deadline_monitor
        from launcher.monitors.liveness import liveness_monitor
        from orchestrator.coordinator import Coordinator

        plan, timeouts, events = self.plan, self.plan.timeouts, self.record.events
        self.coordinator = Coordinator(plan.storage.url, max_steps=plan.max_steps,
                                       poll=timeouts.poll, stall=timeouts.stall,
                                       startup=timeouts.start, reader=plan.storage.reader())
        liveness = liveness_monitor(plan, self.backend, events)
        adapter = CoordinatorMonitor(self.coordinator, self.console, events,
                                     not_answering=liveness.not_answering if liveness else None,
                                     evaluator_timeout=timeouts.evaluator,
                                     on_progress=events.state.record_progress)
        return Watch([adapter, *deadline_monitor(timeouts), *([liveness] if liveness else [])],
                     readiness=liveness, training=adapter.training_view)

    def _start_tracking(self) -> None:
        """The run's MLflow tracker (launcher/tracking/), when tracking is on: observes the
        run's events on a thread of its own, started once every task runs."""
        target = tracking_target(self.spec)
        if target is None:
            return
        from launcher.tracking.tracker import Tracker  # lazy: as ``tracking_target``

        state = self.record.state
        fresh = self.options.retrain and not state.doc.get("attempt")
        self.tracker = Tracker(target, self.spec, self.plan, self.record.run_dir,
                               command=self.command, fresh=fresh, info=self.console.info,
                               record=lambda doc: state.update(tracking=doc),
                               progress=lambda: state.doc.get("progress"))
        self.record.events.observers.append(self.tracker.on_event)
        state.on_running = _then(self.tracker.start, state.on_running)

    def _end_tracking(self, status: int, reason: str) -> None:
        """The MLflow run's end, once state.json and summary.json are final."""
        if self.tracker is not None:
            self.tracker.finish(status, str(self.record.state.doc.get("state")), reason,
                                self.options.spec)


def cancelled(run_dir: str) -> bool:
    """The SIGTERM came from ``launch cancel`` (it leaves its file first)."""
    return os.path.exists(os.path.join(run_dir, CANCEL_FILE))


def _then(first: Callable[[], None], then: Callable[[dict[str, Any]], None] | None
          ) -> Callable[[dict[str, Any]], None]:
    """on_running: ``first()``, then ``then(doc)`` when there is one."""
    def both(doc: dict[str, Any]) -> None:
        first()
        if then is not None:
            then(doc)
    return both
