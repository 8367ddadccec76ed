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
from dataclasses import dataclass, field
from typing import Any

from launcher.errors import SpecError, UsageError

MAX_PORT_RETRIES = 3


@dataclass
class RunResult:
    """What ``launcher.run`` returns: the launcher's exit status (0 succeeded, 1 failed,
    128+N interrupted by signal N), why, one row per task, where the run's files are, and
    the step of the newest complete checkpoint."""

    status: int
    reason: str
    run_dir: str
    final_step: int | None = None
    tasks: list[dict[str, Any]] = field(default_factory=list)
    duration: float = 0.0
    run_id: str = ""

    @property
    def ok(self) -> bool:
        return self.status == 0


def resolve_spec(spec, overrides: dict[str, Any] | None = None):
    """A Spec from a path, a dict (the JSON document) or a Spec; ``overrides`` replace
    top-level keys and are validated with the rest."""
    from launcher.spec import Spec, load_spec, validate

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


def _backend(spec, local: bool):
    from launcher.backends import backend_class

    name = "local" if local else spec.backend
    for section, raw in spec.backend_options.items():
        backend_class(section).validate_options(raw, section)
    cls = backend_class(name)
    return cls(spec, cls.validate_options(spec.backend_options.get(name), name))


def _check_command(spec, command: list[str] | None) -> None:
    if command is not None and (not isinstance(command, (list, tuple)) or not command
                                or not all(isinstance(a, str) for a in command)):
        raise UsageError("command must be a non-empty list of strings")
    missing = [r for r in spec.role_names if not spec.command_for(r, command)]
    if missing:
        where = "command" if len(missing) == len(spec.role_names) else \
            f"roles.{missing[0]}.command"
        raise SpecError(where, "no command to run: set \"command\" in the spec or give it "
                               "after --", spec.source)


def dry_run(spec, command: list[str] | None = None, *, local: bool = False,
            as_json: bool = False, **overrides) -> str:
    """Every task's address, TF_CONFIG, environment and expanded command; starts nothing."""
    spec = resolve_spec(spec, overrides)
    backend = _backend(spec, local)
    _check_command(spec, command)
    return render_dry_run(make_plan(spec, backend, command), backend, as_json=as_json)


def run(spec, command: list[str] | None = None, *, local: bool = False, quiet: bool = False,
        run_dir: str | None = None, verbose: bool = False, retrain: bool = False,
        console=None, **overrides) -> RunResult:
    """Run the job in this process until it ends; see the module docstring."""
    from launcher.environment import check_fsspec_driver, check_run_dir
    from launcher.output.console import make_console

    spec = resolve_spec(spec, overrides)
    backend = _backend(spec, local)
    _check_command(spec, command)
    command = list(command) if command is not None else None
    check_fsspec_driver(spec.model_dir)
    check_run_dir(run_dir or spec.run_dir or os.path.join(".tfcluster", "runs"))
    backend.prepare()
    try:
        plan = make_plan(spec, backend, command)
    except BaseException:
        backend.close()
        raise
    console = console or make_console(quiet=quiet, verbose=verbose)
    return execute(spec, backend, plan, command, console, run_dir=run_dir, retrain=retrain)


def make_plan(spec, backend, command, run_id: str | None = None):
    from launcher.plan import build_plan

    return build_plan(spec, port_for=backend.allocate_port, host_for=backend.host_for,
                      command=command, run_id=run_id, backend=backend.name)


def public_plan(plan) -> dict[str, Any]:
    """The plan as plain data, secrets in the tasks' environments masked: what --dry-run
    prints and plan.json keeps."""
    from launcher.redact import redact_env

    doc = plan.to_dict()
    for task in doc["tasks"]:
        task["env"] = redact_env(task["env"])
    return doc


def render_dry_run(plan, backend, as_json: bool = False) -> str:
    doc = public_plan(plan)
    tasks = doc["tasks"]
    extra = backend.describe(plan)
    if as_json:
        doc["backend"] = backend.name
        if extra is not None:
            doc["rendered"] = extra
        return json.dumps(doc, indent=2)
    lines = [f"# job {plan.name}  run {plan.run_id}  backend {backend.name}  "
             f"max_steps {plan.max_steps if plan.max_steps is not None else '(not set)'}",
             f"# model_dir {plan.model_dir}"]
    marked = backend.ports_picked_at_start and any(t["auto_port"] for t in tasks)
    if marked:
        lines.append("# ports marked 'auto' were picked now and are picked again at start: "
                     "give host:port in the spec to fix them")
    for t in tasks:
        auto = "  (auto)" if marked and t["auto_port"] else ""
        lines.append(f"{t['type']}:{t['index']}  {t['host']}:{t['port']}{auto}")
        for key, value in t["env"].items():
            lines.append(f"  {key}={shlex.quote(value)}")
        lines.append(f"  command: {shlex.join(t['command'])}")
        if t["cwd"]:
            lines.append(f"  cwd: {t['cwd']}")
    if extra:
        lines += ["", extra]
    return "\n".join(lines)


def default_run_dir(spec, run_id: str) -> str:
    base = spec.run_dir or os.path.join(".tfcluster", "runs")
    return os.path.join(base, run_id)


def task_rows(runs) -> list[dict[str, Any]]:
    """One row per task, as summary.json keeps them."""
    return [{"task": r.name, "address": r.task.address, "exit": r.status,
             "status": r.status_text(), "stopped": r.stopped, "restarts": r.restarts,
             "duration": round(r.duration(), 3), "log": r.log_path} for r in runs]


def execute(spec, backend, plan, command, console, run_dir: str | None = None,
            retrain: bool = False) -> RunResult:
    """Preflight, run (new ports and again when a task lost its port to a race), then the
    closing summary; the backend is closed whatever happens."""
    from launcher.events import EventLog
    from launcher.job import Job, PortConflict
    from launcher.output.summary import summary_table

    run_dir = run_dir or default_run_dir(spec, plan.run_id)
    events = EventLog(os.path.join(run_dir, "events.jsonl"))
    monitors: list = []
    try:
        backend.preflight(plan)
        os.makedirs(run_dir, exist_ok=True)     # not for a job refused by the preflight
        from launcher.storage_check import preflight_model_dir
        if preflight_model_dir(plan, backend, retrain, console, events):
            return RunResult(0, "model_dir already holds a checkpoint at max_steps", run_dir,
                             run_id=plan.run_id)
        _write_plan(run_dir, plan)
        for attempt in range(MAX_PORT_RETRIES + 1):
            job = Job(plan, backend, run_dir, console, events=events)
            try:
                result = job.run()
                monitors = job.monitors
                break
            except PortConflict as e:
                if attempt == MAX_PORT_RETRIES:
                    raise
                console.info(f"{e}; picking new ports and starting again")
                events.write("port_conflict", message=str(e))
                plan = make_plan(spec, backend, command, run_id=plan.run_id)
                _write_plan(run_dir, plan)
    finally:
        console.close()
        backend.close()
    table = summary_table(result.runs)
    verdict = "succeeded" if result.status == 0 else f"FAILED (exit status {result.status})"
    console.info(f"job {verdict} after {result.duration:.1f}s: {result.reason}\n{table}")
    from launcher.output.metrics_table import metrics_table
    metrics = metrics_table(plan.storage)
    if metrics:
        console.info(f"metrics of each checkpoint, evaluated afresh:\n{metrics}")
    if console.hidden:
        console.info(f"{console.hidden} lines of TensorFlow's routine output (deprecation "
                     "notices, banners, INFO) are only in the task logs; --verbose shows them")
    rows = task_rows(result.runs)
    with open(os.path.join(run_dir, "summary.json"), "w", encoding="utf-8") as f:
        json.dump({"status": result.status, "reason": result.reason,
                   "duration": round(result.duration, 3),
                   "tasks": [{k: v for k, v in r.items() if k != "status"} for r in rows]},
                  f, indent=2)
    return RunResult(result.status, result.reason, run_dir, _final_step(monitors), rows,
                     round(result.duration, 3), plan.run_id)


def _final_step(monitors: list) -> int | None:
    for monitor in monitors:
        coordinator = getattr(monitor, "coordinator", None)
        if coordinator is not None:
            p = coordinator.progress()
            return p.step if p.step is not None else p.latest_step
    return None


def _write_plan(run_dir: str, plan) -> None:
    with open(os.path.join(run_dir, "plan.json"), "w", encoding="utf-8") as f:
        json.dump(public_plan(plan), f, indent=2)
