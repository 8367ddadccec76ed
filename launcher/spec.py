"""The cluster spec: parse and validate JSON into plain data, one clear error per mistake.

Every error names the field (``cluster.worker[1]``) and what is wrong with it; broken JSON
names the line and column. Unknown keys are errors: a typo must not be silently ignored.
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from launcher.checks import (
    Address,
    check_keys,
    expect_argv,
    expect_bool,
    expect_dict,
    expect_int,
    expect_number,
    expect_str,
    experiment_problem,
    fail,
    parse_address,
    tracking_uri_problem,
    type_name,
)
from launcher.errors import SpecError
from orchestrator.policies import POLICIES, RestartPolicy
from orchestrator.roles import JOB_NAMES, ROLES, TRAINERS, trainer_jobs

# ---------------------------------------------------------------- the spec, declared once
# Each key of the spec with its JSON Schema, its description and (where it has one) its
# default: cluster_specs/schema.json (launcher/schema.py), the keys validate() accepts, the
# defaults it fills in and docs/spec.md's field table all come from here. Adding a field is
# one entry here, and its parsing in validate() when it needs more than its schema says.
# Besides these, each registered backend's name is a key: its options (launcher/backends).
STRATEGIES = ("estimator", "parameter_server", "multi_worker_mirrored")
# "keras": which Keras the trainers run (docs/keras.md). Absent: the script's own.
TF_KERAS, KERAS_JAX = "tf-keras", "jax"
KERAS_ROUTES = (TF_KERAS, KERAS_JAX)


def _per_role(ref: str, roles: tuple[str, ...] = ROLES) -> dict[str, Any]:
    return {role: {"$ref": f"#/$defs/{ref}"} for role in roles}


TIMEOUTS: dict[str, dict[str, Any]] = {
    "start": {"$ref": "#/$defs/seconds", "default": 60.0, "description":
              "A task that cannot start in this time (remote checks, allocation) fails."},
    "stall": {"$ref": "#/$defs/seconds", "default": 300.0, "description":
              "No new step or checkpoint for this long ends the job."},
    "finish": {"$ref": "#/$defs/seconds", "default": 30.0, "description":
               "After max_steps: time for trainers that no longer train to exit."},
    "save": {"$ref": "#/$defs/seconds", "default": 300.0, "description":
             "After max_steps: the longest trainers still at work (writing model_dir, or "
             "synchronous trainers that all still run: a final save, an export) are waited "
             "for, from the moment training was done. Stopped then, they were cut short and "
             "the job fails."},
    # TensorFlow's evaluator sleeps EvalSpec.throttle_secs (600 s by default) between two
    # evaluations, so the final one may come 600 s after the previous one, then takes its
    # own time; 900 s covers that (docs/ending.md).
    "evaluator": {"$ref": "#/$defs/seconds", "default": 900.0, "description":
                  "After the trainers ended: time for the evaluator to evaluate the final "
                  "checkpoint."},
    "kill": {"$ref": "#/$defs/seconds", "default": 5.0, "description":
             "SIGTERM to SIGKILL."},
    "poll": {"type": "number", "exclusiveMinimum": 0, "default": 1.0, "description":
             "How often the coordinator looks at model_dir."},
    "job": {"$ref": "#/$defs/seconds", "default": 0.0, "description":
            "The whole job's deadline in seconds (0: none): when it passes, every task is "
            "stopped and the job fails with that reason."},
    "unresponsive": {"$ref": "#/$defs/seconds", "default": 30.0, "description":
                     "A task whose TensorFlow server answered gRPC once and then not for "
                     "this many seconds is lost and goes through its restart policy (0: no "
                     "gRPC checks)."},
    "preempt": {"$ref": "#/$defs/seconds", "default": 60.0, "description":
                "SIGTERM to the launcher (a preemption notice): the chief saves a checkpoint "
                "at its current step while every ps serves, and the launcher waits at most "
                "this many seconds for it to be complete in model_dir before it stops the "
                "tasks (0: stop at once, as Ctrl-C). Default 60."},
}
ROLE_FIELDS: dict[str, dict[str, Any]] = {
    "command": {"type": "array", "minItems": 1, "items": {"type": "string"},
                "description": "the role's own command (replaces the top-level one)"},
    "env": {"$ref": "#/$defs/env", "description": "extends the top-level env"},
    "workdir": {"type": "string", "description": "the role's own working directory"},
    "minimum": {"type": "integer", "minimum": 0, "description":
                "roles.worker only, asynchronous training (parameter_server, or estimator "
                "with a ps): the fewest workers the job goes on with. A worker that cannot "
                "come back (its restarts spent, its host unreachable) no longer ends the job "
                "while this many are left; it is started again once its host answers again "
                "(docs/reliability.md)."},
}
RESOURCE_FIELDS: dict[str, dict[str, Any]] = {
    "cpus": {"type": "integer", "minimum": 0, "description": "CPUs per task (Slurm, "
                                                            "Kubernetes, docker)"},
    "gpus": {"type": "integer", "minimum": 0, "description":
             "GPUs per task: CUDA_VISIBLE_DEVICES on local, ssh and docker, --gpus on Slurm, "
             "nvidia.com/gpu on Kubernetes (docs/gpus.md)"},
    "devices": {"type": "array", "minItems": 1, "items": {
        "type": ["string", "integer"], "minimum": 0,
        "pattern": "^([A-Za-z0-9][A-Za-z0-9/-]*(,[A-Za-z0-9][A-Za-z0-9/-]*)*)?$"},
        "description": "local, ssh, docker: each task's GPUs, one entry per task of the role "
                       "(\"0,1\", a UUID, \"\" for none); not in resources.default"},
    "gpu_share": {"type": "boolean", "description":
                  "the role's tasks may share GPUs with each other "
                  "(TF_FORCE_GPU_ALLOW_GROWTH=true): one GPU for several tasks on a "
                  "development machine"},
    "memory": {"type": "string", "pattern": "^[0-9]+(\\.[0-9]+)?([KMGT]i?)?$",
               "description": "memory per task: '4G', '512M', '2Gi' (Slurm, Kubernetes, "
                              "docker)"},
    "partition": {"type": "string", "description": "the role's Slurm partition"},
    "time": {"type": "string", "description": "the role's Slurm time limit"},
}
RESTART_FIELDS: dict[str, dict[str, Any]] = {
    "policy": {"enum": list(POLICIES), "description": "when a task of the role restarts"},
    "max_restarts": {"type": "integer", "minimum": 0,
                     "description": "restarts before the role's loss ends the job (default "
                                    "3, never: 0)"},
    "backoff": {"type": "number", "minimum": 0,
                "description": "seconds before a restart (default 1)"},
}
FIELDS: dict[str, dict[str, Any]] = {
    "$schema": {"type": "string"},
    "description": {"type": "string"},
    "name": {"type": "string", "pattern": "^[A-Za-z0-9][A-Za-z0-9_.-]{0,62}$",
             "description": "The job's name (default: the spec file's name)."},
    "cluster": {
        "type": "object",
        "description": "TensorFlow's ClusterSpec shape: job name to a list of addresses, or "
                       "a count of tasks on localhost.",
        "additionalProperties": False, "minProperties": 1,
        "properties": {"chief": {"$ref": "#/$defs/single"},
                       "master": {"$ref": "#/$defs/single"},
                       "worker": {"$ref": "#/$defs/tasks"}, "ps": {"$ref": "#/$defs/tasks"}},
        "anyOf": [{"required": ["chief"]}, {"required": ["master"]},
                  {"required": ["worker"]}],
        "not": {"required": ["chief", "master"]}},
    "evaluator": {"oneOf": [{"$ref": "#/$defs/address"}, {"type": "null"}],
                  "description": "The evaluator's address (outside the cluster)."},
    "command": {"type": "array", "minItems": 1, "items": {"type": "string"},
                "description": "Every task's command (a role's own: roles)."},
    "model_dir": {"type": "string", "minLength": 1, "description":
                  "A path or fsspec URL (file://, s3://, sftp://...) shared by every task, ps "
                  "included."},
    "max_steps": {"type": ["integer", "null"], "minimum": 1,
                  "description": "The global step the job ends at."},
    "epochs": {"type": "integer", "minimum": 1,
               "description": "Each example read this many times by the whole cluster."},
    "examples": {"type": "integer", "minimum": 1, "description": "Examples in one epoch."},
    "batch_size": {"type": "integer", "minimum": 1, "description": "Per trainer."},
    "backend": {"enum": ["local"], "default": "local",
                "description": "Where the tasks run (each backend's options: its section)."},
    "strategy": {"enum": list(STRATEGIES), "description":
                 "Who reads training data and what a global step is: estimator (chief and "
                 "workers, asynchronous; default with a ps), parameter_server (TF2 PSS: the "
                 "workers, asynchronous), multi_worker_mirrored (chief and workers, "
                 "synchronous; default without a ps)."},
    "keras": {"enum": list(KERAS_ROUTES), "description":
              "The Keras the trainers run (docs/keras.md): tf-keras (Keras 2 through "
              "TF_USE_LEGACY_KERAS=1, checked to match TensorFlow where each task runs: "
              "Keras 3 cannot fit under MultiWorkerMirroredStrategy or "
              "ParameterServerStrategy), or jax (Keras 3 on JAX across processes: "
              "KERAS_BACKEND=jax and KERAS_DISTRIBUTION_* per process, chief and workers "
              "only, collective). Absent: the script's own Keras."},
    "env": {"$ref": "#/$defs/env", "description": "Every task's environment (besides "
                                                   "TF_CONFIG and TFCLUSTER_*)."},
    "roles": {"type": "object", "description":
              "Per-role settings: a role's command and workdir replace the top-level ones, "
              "its env extends the top-level env. Arguments and env values expand $(VAR) "
              "from the task's environment (TFCLUSTER_TASK_TYPE, TFCLUSTER_TASK_INDEX, "
              "TFCLUSTER_<JOB>_HOSTS...), as Kubernetes does.",
              "additionalProperties": False, "properties": _per_role("role")},
    "workdir": {"type": "string", "description": "The tasks' working directory."},
    "run_dir": {"type": "string", "description":
                "Where logs, events and the summary go (default .tfcluster/runs/RUN_ID)."},
    "check_storage": {"type": "boolean", "default": True, "description":
                      "Every task writes a probe into model_dir from where it runs before "
                      "training: a task that does not see the same storage is refused."},
    "tensorboard": {"description":
                    "TensorBoard on model_dir with the run, on the chief's host (local, ssh) "
                    "or this machine; its URL is printed and shown by launch status; it ends "
                    "with the run (docs/tensorboard.md).",
                    "oneOf": [{"type": "boolean"},
                              {"type": "object", "additionalProperties": False,
                               "properties": {"port": {"type": "integer", "minimum": 1,
                                                       "maximum": 65535}}}]},
    "tracking": {"type": "object", "additionalProperties": False, "description":
                 "Log the run to an MLflow tracking server (docs/tracking.md); without it, "
                 "$MLFLOW_TRACKING_URI turns tracking on.",
                 "properties": {"mlflow": {
                     "type": "object", "additionalProperties": False,
                     "properties": {
                         "tracking_uri": {"type": "string", "pattern": "^[Hh][Tt][Tt][Pp][Ss]?://",
                                          "description": "The server's http(s) URL (default "
                                                         "$MLFLOW_TRACKING_URI)."},
                         "experiment": {"type": "string", "minLength": 1, "maxLength": 500,
                                        "description": "Default $MLFLOW_EXPERIMENT_NAME, else "
                                                       "the spec's name."},
                         "run_name": {"type": "string", "minLength": 1},
                         "tags": {"type": "object",
                                  "additionalProperties": {"type": "string"}}}}}},
    "tf_config_model_dir": {"type": "boolean", "default": True, "description":
                            "Estimator jobs: put model_dir into every task's TF_CONFIG, where "
                            "tf.estimator.RunConfig reads it (default true). A script that "
                            "passes another model_dir string gets TensorFlow's mismatch "
                            "error; false leaves TF_CONFIG without it."},
    "timeouts": {"type": "object", "additionalProperties": False, "properties": TIMEOUTS,
                 "description": "Seconds (docs/reliability.md, docs/ending.md)."},
    "restart": {"type": "object", "additionalProperties": False,
                "properties": _per_role("restart"), "description":
                "Per role: never, on-failure or always, max_restarts, backoff; the defaults "
                "follow TensorFlow's rules (docs/reliability.md)."},
    "resources": {"type": "object", "additionalProperties": False,
                  "description": "Per role (default: every role): what each task gets.",
                  "properties": {"default": {"allOf": [{"$ref": "#/$defs/resources"},
                                                       {"not": {"required": ["devices"]}}]},
                                 **_per_role("resources")}},
}
REQUIRED = ("cluster", "model_dir")
ADDRESS_PATTERN = ("^(\\[[0-9A-Fa-f:.]+\\]|[A-Za-z0-9_]([A-Za-z0-9_.-]*[A-Za-z0-9_])?)"
                   "(:[0-9]{1,5})?$")
DEFS: dict[str, Any] = {
    "env": {"type": "object",
            "propertyNames": {"pattern": "^[A-Za-z_][A-Za-z0-9_]*$",
                              "not": {"pattern": "^(TF_CONFIG$|CUDA_VISIBLE_DEVICES$|"
                                                 "TFCLUSTER_)"}},
            "additionalProperties": {"type": "string"}},
    "role": {"type": "object", "additionalProperties": False, "properties": ROLE_FIELDS},
    "address": {"type": "string", "pattern": ADDRESS_PATTERN},
    "tasks": {"oneOf": [{"type": "integer", "minimum": 1, "maximum": 4096},
                        {"type": "array", "minItems": 1,
                         "items": {"$ref": "#/$defs/address"}}]},
    "single": {"oneOf": [{"const": 1},
                         {"type": "array", "minItems": 1, "maxItems": 1,
                          "items": {"$ref": "#/$defs/address"}}]},
    "seconds": {"type": "number", "minimum": 0},
    "restart": {"oneOf": [{"enum": list(POLICIES)},
                          {"type": "object", "additionalProperties": False,
                           "properties": RESTART_FIELDS}]},
    "resources": {"type": "object", "additionalProperties": False,
                  "not": {"required": ["gpus", "devices"]}, "properties": RESOURCE_FIELDS},
}
DEPENDENT_REQUIRED = {"epochs": ["examples", "batch_size"],
                      "examples": ["epochs", "batch_size"],
                      "batch_size": ["epochs", "examples"]}

TOP_LEVEL_KEYS = tuple(FIELDS)
ROLE_KEYS = tuple(ROLE_FIELDS)           # what "roles": {ROLE: {...}} may set
TIMEOUT_DEFAULTS = {name: float(field["default"]) for name, field in TIMEOUTS.items()}
RESOURCE_KEYS = tuple(RESOURCE_FIELDS)
_DEVICE_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9/-]*$")   # an index or a UUID (GPU-..., MIG-...)
_NAME_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,62}$")


@dataclass(frozen=True)
class TensorBoardSettings:
    """``"tensorboard": true`` or ``{"port": N}``: TensorBoard on model_dir with the run
    (launcher/tensorboard.py); port None: a free one."""

    port: int | None = None


@dataclass(frozen=True)
class MlflowSettings:
    """``"tracking": {"mlflow": {...}}``: where the run is logged (launcher/tracking/); None
    fields fall back to the environment ($MLFLOW_TRACKING_URI, $MLFLOW_EXPERIMENT_NAME)."""

    tracking_uri: str | None = None
    experiment: str | None = None
    run_name: str | None = None
    tags: dict[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class RoleSettings:
    """One role's own command, environment and working directory (``"roles": {"ps": ...}``):
    each replaces (``env``: extends) the top-level value for that role's tasks. ``minimum``
    (workers of asynchronous training only): the fewest workers the job goes on with when
    some cannot come back (docs/reliability.md, "Elastic workers")."""

    command: list[str] | None = None
    env: dict[str, str] = field(default_factory=dict)
    workdir: str | None = None
    minimum: int | None = None


@dataclass
class Spec:
    """A validated cluster spec. Plain data: print it, diff it, build plans from it."""

    name: str
    cluster: dict[str, list[Address]]
    command: list[str]
    model_dir: str
    evaluator: Address | None = None
    max_steps: int | None = None
    epochs: int | None = None
    examples: int | None = None
    batch_size: int | None = None
    backend: str = "local"
    strategy: str = "estimator"
    keras: str | None = None           # "tf-keras", "jax" or None (the script's own)
    env: dict[str, str] = field(default_factory=dict)
    workdir: str | None = None
    run_dir: str | None = None
    timeouts: dict[str, float] = field(default_factory=lambda: dict(TIMEOUT_DEFAULTS))
    restart: dict[str, RestartPolicy] = field(default_factory=dict)
    resources: dict[str, dict[str, Any]] = field(default_factory=dict)
    check_storage: bool = True
    tf_config_model_dir: bool = True   # Estimator jobs: TF_CONFIG["model_dir"] = model_dir
    backend_options: dict[str, dict[str, Any]] = field(default_factory=dict)
    roles: dict[str, RoleSettings] = field(default_factory=dict)
    tensorboard: TensorBoardSettings | None = None
    tracking: MlflowSettings | None = None
    source: str | None = None

    def command_for(self, role: str, command: list[str] | None = None) -> list[str]:
        """The role's own command, else ``command`` (given after ``--``), else the spec's."""
        own = self.roles.get(role)
        return list((own and own.command) or command or self.command)

    def env_for(self, role: str) -> dict[str, str]:
        """The spec's env with the role's own on top."""
        env = dict(self.env)
        if role in self.roles:
            env.update(self.roles[role].env)
        return env

    def workdir_for(self, role: str) -> str | None:
        own = self.roles.get(role)
        return (own and own.workdir) or self.workdir

    @property
    def role_names(self) -> list[str]:
        """Every role that has tasks: the cluster's jobs, and the evaluator when there is one."""
        return list(self.cluster) + (["evaluator"] if self.evaluator is not None else [])

    @property
    def trainers(self) -> list[tuple[str, int]]:
        """The tasks that read training data, in shard order: chief (or master), then workers.
        Under ParameterServerStrategy the chief only coordinates: the workers alone."""
        order = [j for j in trainer_jobs(self.strategy) if j in self.cluster]
        return [(j, i) for j in order for i in range(len(self.cluster[j]))]

    @property
    def synchronous(self) -> bool:
        """Collective (MultiWorkerMirroredStrategy) training: one step is one batch on every
        trainer at once."""
        return self.strategy == "multi_worker_mirrored"


def resources_for(resources: dict[str, dict[str, Any]], role: str) -> dict[str, Any]:
    """A spec's ``resources``: resources.default overlaid with resources.<role>."""
    res = dict(resources.get("default", {}))
    res.update(resources.get(role, {}))
    return res


def load_spec(path: str, overrides: dict[str, Any] | None = None, *,
              backends: Sequence[str]) -> Spec:
    """Read and validate a spec file; ``overrides`` replace top-level keys before validation.
    ``backends``: the registered backends' names (launcher.api.load_spec hands them)."""
    try:
        with open(path, encoding="utf-8") as f:
            text = f.read()
    except FileNotFoundError:
        raise SpecError("", f"spec file not found: {path}") from None
    except IsADirectoryError:
        raise SpecError("", f"spec path is a directory, not a file: {path}") from None
    except PermissionError:
        raise SpecError("", f"spec file is not readable (permission denied): {path}") from None
    except UnicodeDecodeError as e:
        raise SpecError("", f"spec file is not UTF-8 text: {path} ({e.reason})") from None
    except OSError as e:
        raise SpecError("", f"spec file cannot be read: {path} ({e.strerror or e})") from None
    return parse_spec(text, source=path, overrides=overrides, backends=backends)


def parse_spec(text: str, source: str | None = None,
               overrides: dict[str, Any] | None = None, *, backends: Sequence[str]) -> Spec:
    """Parse JSON text into a Spec; raise SpecError naming the problem."""
    try:
        raw = json.loads(text)
    except json.JSONDecodeError as e:
        raise SpecError(
            "", f"invalid JSON at line {e.lineno}, column {e.colno}: {e.msg}", source
        ) from None
    except RecursionError:
        raise SpecError("", "invalid JSON: lists or objects nested too deeply", source) from None
    if overrides and isinstance(raw, dict):
        raw = {**raw, **overrides}
    try:
        return validate(raw, source, backends=backends)
    except SpecError as e:
        if e.source is None and source is not None:
            raise SpecError(e.field, e.message, source) from None
        raise


def _parse_cluster(raw: Any) -> dict[str, list[Address]]:
    cluster = expect_dict(raw, "cluster")
    if not cluster:
        raise fail("cluster", "must name at least one job (chief, worker, ps)")
    out: dict[str, list[Address]] = {}
    for job, value in cluster.items():
        where = f"cluster.{job}"
        if job == "evaluator":
            raise fail(where, "the evaluator is given apart from cluster, as the top-level "
                               "key \"evaluator\" (TensorFlow keeps it outside the cluster)")
        if job not in JOB_NAMES:
            raise fail(where, f"unknown job name (allowed: {', '.join(JOB_NAMES)})")
        if isinstance(value, bool) or not isinstance(value, (int, list)):
            raise fail(where, "must be a list of addresses or a count of tasks on localhost, "
                               f"got {type_name(value)}")
        if isinstance(value, int):
            if value < 1:
                raise fail(where, f"task count must be at least 1, got {value}")
            if value > 4096:
                raise fail(where, f"task count {value} is more than 4096")
            out[job] = [Address("localhost") for _ in range(value)]
        else:
            if not value:
                raise fail(where, "must list at least one address (leave the job out instead)")
            out[job] = [parse_address(a, f"{where}[{i}]") for i, a in enumerate(value)]
    for job in ("chief", "master"):
        if job in out and len(out[job]) > 1:
            raise fail(f"cluster.{job}", f"at most one {job} task, got {len(out[job])}")
    if "master" in out and "chief" in out:
        raise fail("cluster.master", "legacy 'master' cannot be used together with 'chief'")
    if not any(j in out for j in TRAINERS):
        raise fail("cluster", "needs a task that trains: chief, master or worker")
    return out


def _check_duplicates(cluster: dict[str, list[Address]], evaluator: Address | None) -> None:
    seen: dict[tuple[str, int], str] = {}
    entries = [(f"cluster.{j}[{i}]", a) for j, addrs in cluster.items() for i, a in
               enumerate(addrs)]
    if evaluator is not None:
        entries.append(("evaluator", evaluator))
    for where, addr in entries:
        if addr.port is None:
            continue
        key = (addr.host.lower(), addr.port)
        if key in seen:
            raise fail(where, f"address {addr} is already used by {seen[key]}")
        seen[key] = where


def _parse_env(raw: Any, where: str) -> dict[str, str]:
    env: dict[str, str] = {}
    for key, value in expect_dict(raw, where).items():
        if not re.match(r"^[A-Za-z_][A-Za-z0-9_]*$", key):
            raise fail(f"{where}.{key}", "is not a valid environment variable name")
        if key == "TF_CONFIG" or key.startswith("TFCLUSTER_"):
            raise fail(f"{where}.{key}", "is set by tfcluster for every task; do not set it")
        if key == "CUDA_VISIBLE_DEVICES":
            raise fail(f"{where}.{key}", "is set by tfcluster for every task from its "
                                          "resources: give resources.ROLE.gpus or .devices "
                                          "(docs/gpus.md)")
        env[key] = expect_str(value, f"{where}.{key}", allow_empty=True)
    return env


def _parse_roles(raw: Any, cluster: dict[str, list[Address]], evaluator: Address | None,
                 strategy: str) -> dict[str, RoleSettings]:
    roles = expect_dict(raw, "roles")
    check_keys(roles, ROLES, "roles")
    out = {}
    for role, value in roles.items():
        where = f"roles.{role}"
        if role not in cluster and not (role == "evaluator" and evaluator is not None):
            raise fail(where, f"the spec has no {role} task (add it to "
                               f"{'evaluator' if role == 'evaluator' else 'cluster'} or "
                               "leave it out of roles)")
        settings = expect_dict(value, where)
        check_keys(settings, ROLE_KEYS, where)
        out[role] = RoleSettings(
            command=expect_argv(settings["command"], f"{where}.command")
            if "command" in settings else None,
            env=_parse_env(settings["env"], f"{where}.env") if "env" in settings else {},
            workdir=expect_str(settings["workdir"], f"{where}.workdir")
            if "workdir" in settings else None,
            minimum=_parse_minimum(settings["minimum"], role, cluster, strategy)
            if "minimum" in settings else None)
    return out


def _parse_minimum(raw: Any, role: str, cluster: dict[str, list[Address]],
                   strategy: str) -> int:
    """``roles.worker.minimum``: the fewest workers an asynchronous job goes on with."""
    where = f"roles.{role}.minimum"
    if role != "worker":
        raise fail(where, "only workers may be fewer: give it in roles.worker (the chief "
                          "saves the checkpoints, a ps holds variables)")
    if strategy == "multi_worker_mirrored":
        raise fail(where, "multi_worker_mirrored is synchronous: every worker takes part in "
                          "every step, so the job cannot go on with fewer (a minimum needs "
                          "parameter_server, or estimator with a ps)")
    if "ps" not in cluster:
        raise fail(where, "needs asynchronous training, with a ps (parameter_server, or "
                          "estimator with a ps): without one the workers are not independent")
    least = 1 if strategy == "parameter_server" else 0
    minimum = expect_int(raw, where, minimum=least)
    count = len(cluster[role])
    if minimum > count:
        raise fail(where, f"{minimum} is more than the {count} worker task"
                          f"{'s' if count != 1 else ''} of cluster.worker")
    return minimum


def _parse_restart(raw: Any) -> dict[str, RestartPolicy]:
    restart = expect_dict(raw, "restart")
    check_keys(restart, ROLES, "restart")
    out = {}
    for role, value in restart.items():
        where = f"restart.{role}"
        if isinstance(value, str):
            value = {"policy": value}
        pol = expect_dict(value, where)
        check_keys(pol, tuple(RESTART_FIELDS), where)
        policy = expect_str(pol.get("policy", "on-failure"), f"{where}.policy")
        if policy not in POLICIES:
            raise fail(f"{where}.policy", f"must be one of {', '.join(POLICIES)}, "
                                           f"got {policy!r}")
        default_max = 0 if policy == "never" else 3
        max_restarts = expect_int(pol.get("max_restarts", default_max), f"{where}.max_restarts",
                                  minimum=0)
        backoff = expect_number(pol.get("backoff", 1.0), f"{where}.backoff")
        out[role] = RestartPolicy(policy, max_restarts, backoff)
    return out


def _parse_resources(raw: Any) -> dict[str, dict[str, Any]]:
    resources = expect_dict(raw, "resources")
    check_keys(resources, ("default",) + ROLES, "resources")
    out = {}
    for role, value in resources.items():
        where = f"resources.{role}"
        res = expect_dict(value, where)
        check_keys(res, RESOURCE_KEYS, where)
        clean: dict[str, Any] = {}
        for key in ("cpus", "gpus"):
            if key in res:
                clean[key] = expect_int(res[key], f"{where}.{key}", minimum=0)
        for key in ("memory", "partition", "time"):
            if key in res:
                clean[key] = expect_str(res[key], f"{where}.{key}")
        if "memory" in clean and not re.match(r"^\d+(\.\d+)?([KMGT]i?)?$", clean["memory"]):
            raise fail(f"{where}.memory", f"must look like '4G', '512M' or '2Gi', got "
                                           f"{clean['memory']!r}")
        if "gpu_share" in res:
            clean["gpu_share"] = expect_bool(res["gpu_share"], f"{where}.gpu_share")
        if "devices" in res:
            if role == "default":
                raise fail(f"{where}.devices", "names each task's GPUs: give it per role "
                                                "(resources.worker.devices)")
            if "gpus" in res:
                raise fail(f"{where}.devices", "give gpus (a count) or devices (each "
                                                "task's GPUs), not both")
            clean["devices"] = _parse_devices(res["devices"], f"{where}.devices")
        out[role] = clean
    return out


def _parse_devices(raw: Any, where: str) -> list[str]:
    """resources.ROLE.devices: one entry per task of the role, as CUDA_VISIBLE_DEVICES
    writes it: "0", "0,1", a UUID, or "" (no GPU)."""
    if not isinstance(raw, list) or not raw:
        raise fail(where, "must be a list with one entry per task of the role (\"0,1\", "
                           "a GPU UUID, or \"\" for none)")
    out = []
    for i, entry in enumerate(raw):
        if isinstance(entry, int) and not isinstance(entry, bool) and entry >= 0:
            entry = str(entry)
        text = expect_str(entry, f"{where}[{i}]", allow_empty=True)
        names = [d.strip() for d in text.split(",")] if text.strip() else []
        for d in names:
            if not _DEVICE_RE.match(d):
                raise fail(f"{where}[{i}]", f"{d!r} is not a GPU index or UUID")
        if len(set(names)) != len(names):
            raise fail(f"{where}[{i}]", f"names a GPU twice: {text!r}")
        out.append(",".join(names))
    return out


def _check_devices(resources: dict[str, dict[str, Any]], cluster: dict[str, list[Address]],
                   evaluator: Address | None) -> None:
    """resources.ROLE.devices has one entry per task of the role."""
    for role, res in resources.items():
        if "devices" not in res:
            continue
        n = len(cluster.get(role, [])) if role != "evaluator" else int(evaluator is not None)
        if len(res["devices"]) != n:
            raise fail(f"resources.{role}.devices", f"has {len(res['devices'])} entries for "
                                                     f"{n} {role} task{'s' if n != 1 else ''}"
                                                     ": give one per task")


def _parse_tensorboard(raw: Any) -> TensorBoardSettings | None:
    if raw is None or raw is False:
        return None
    if raw is True:
        return TensorBoardSettings()
    if not isinstance(raw, dict):
        raise fail("tensorboard", 'must be true, false or {"port": N}, got '
                                   f"{type_name(raw)}")
    check_keys(raw, ("port",), "tensorboard")
    port = raw.get("port")
    if port is not None:
        port = expect_int(port, "tensorboard.port")
        if port > 65535:
            raise fail("tensorboard.port", f"must be at most 65535, got {port}")
    return TensorBoardSettings(port)


def _parse_tracking(raw: Any) -> MlflowSettings | None:
    """``"tracking": {"mlflow": {...}}``: checked here; the environment's URI when the spec
    gives none is checked where the run starts (launcher/tracking/)."""
    if raw is None:
        return None
    check_keys(expect_dict(raw, "tracking"), ("mlflow",), "tracking")
    if "mlflow" not in raw:
        return None
    given = expect_dict(raw["mlflow"], "tracking.mlflow")
    check_keys(given, ("tracking_uri", "experiment", "run_name", "tags"), "tracking.mlflow")
    values: dict[str, str | None] = {}
    for key in ("tracking_uri", "experiment", "run_name"):
        values[key] = expect_str(given[key], f"tracking.mlflow.{key}") if key in given else None
    uri, experiment = values["tracking_uri"], values["experiment"]
    problem = tracking_uri_problem(uri) if uri is not None else None
    if problem:
        raise fail("tracking.mlflow.tracking_uri", problem)
    problem = experiment_problem(experiment) if experiment is not None else None
    if problem:
        raise fail("tracking.mlflow.experiment", problem)
    tags = expect_dict(given.get("tags", {}), "tracking.mlflow.tags")
    for key, value in tags.items():
        expect_str(value, f"tracking.mlflow.tags.{key}", allow_empty=True)
    return MlflowSettings(uri, experiment, values["run_name"], dict(tags))


def validate(raw: Any, source: str | None = None, *, backends: Sequence[str]) -> Spec:
    """Validate a decoded JSON document; return a Spec. ``backends``: the names of the
    registered backends, each also the key of its options section (checked by the backend
    itself, launcher/backends/options.py)."""
    backends = tuple(backends)
    spec_obj = expect_dict(raw, "spec")
    check_keys(spec_obj, TOP_LEVEL_KEYS + backends, "")
    if "cluster" not in spec_obj:
        raise fail("cluster", "is required (job name to a list of addresses)")
    cluster = _parse_cluster(spec_obj["cluster"])
    evaluator = _parse_evaluator(spec_obj, cluster)
    _check_duplicates(cluster, evaluator)
    name = _parse_name(spec_obj, source)
    command = expect_argv(spec_obj["command"], "command") if "command" in spec_obj else []
    if "model_dir" not in spec_obj:
        raise fail("model_dir", "is required (a path or fsspec URL shared by every task)")
    model_dir = expect_str(spec_obj["model_dir"], "model_dir")
    max_steps, epochs, examples, batch_size = _parse_steps(spec_obj)
    backend = expect_str(spec_obj.get("backend", "local"), "backend")
    if backend not in backends:
        raise fail("backend", f"unknown backend {backend!r} (allowed: {', '.join(backends)})")
    keras = _parse_keras(spec_obj, cluster, evaluator)
    strategy = _parse_strategy(spec_obj, cluster, keras)
    env = _parse_env(spec_obj["env"], "env") if "env" in spec_obj else {}
    timeouts = _parse_timeouts(spec_obj["timeouts"]) if "timeouts" in spec_obj else \
        dict(TIMEOUT_DEFAULTS)
    resources = _parse_resources(spec_obj["resources"]) if "resources" in spec_obj else {}
    _check_devices(resources, cluster, evaluator)
    backend_options = {section: expect_dict(spec_obj[section], section)
                       for section in backends if section in spec_obj}

    return Spec(
        name=name,
        cluster=cluster,
        command=command,
        model_dir=model_dir,
        evaluator=evaluator,
        max_steps=max_steps,
        epochs=epochs,
        examples=examples,
        batch_size=batch_size,
        backend=backend,
        strategy=strategy,
        keras=keras,
        env=env,
        workdir=expect_str(spec_obj["workdir"], "workdir") if "workdir" in spec_obj else None,
        run_dir=expect_str(spec_obj["run_dir"], "run_dir") if "run_dir" in spec_obj else None,
        timeouts=timeouts,
        restart=_parse_restart(spec_obj["restart"]) if "restart" in spec_obj else {},
        resources=resources,
        check_storage=expect_bool(spec_obj.get("check_storage", True), "check_storage"),
        tf_config_model_dir=expect_bool(spec_obj.get("tf_config_model_dir", True),
                                        "tf_config_model_dir"),
        backend_options=backend_options,
        roles=_parse_roles(spec_obj["roles"], cluster, evaluator, strategy)
        if "roles" in spec_obj else {},
        tensorboard=_parse_tensorboard(spec_obj.get("tensorboard")),
        tracking=_parse_tracking(spec_obj.get("tracking")),
        source=source,
    )


def _parse_evaluator(spec_obj: dict, cluster: dict[str, list[Address]]) -> Address | None:
    if spec_obj.get("evaluator") is None:
        return None
    evaluator = parse_address(spec_obj["evaluator"], "evaluator")
    if "master" in cluster:
        raise fail("evaluator", "legacy 'master' cannot be used together with an evaluator")
    return evaluator


def _parse_name(spec_obj: dict, source: str | None) -> str:
    default_name = os.path.splitext(os.path.basename(source))[0] if source else "job"
    name = expect_str(spec_obj.get("name", default_name), "name")
    if not _NAME_RE.match(name):
        raise fail("name", f"{name!r} must be letters, digits, '_', '.', '-' (at most 63)")
    return name


def _parse_steps(spec_obj: dict) -> tuple[int | None, int | None, int | None, int | None]:
    """max_steps, or epochs, examples and batch_size (max_steps is derived from them)."""
    max_steps = None
    if spec_obj.get("max_steps") is not None:
        max_steps = expect_int(spec_obj["max_steps"], "max_steps")
    epoch_keys = [k for k in ("epochs", "examples", "batch_size") if spec_obj.get(k) is not None]
    if not epoch_keys:
        return max_steps, None, None, None
    if max_steps is not None:
        raise fail(epoch_keys[0], "give either max_steps or epochs/examples/batch_size, "
                                  "not both")
    missing = [k for k in ("epochs", "examples", "batch_size") if k not in epoch_keys]
    if missing:
        raise fail(missing[0], f"is required together with {', '.join(epoch_keys)} "
                               "(max_steps is derived from epochs, examples, batch_size)")
    return (None, expect_int(spec_obj["epochs"], "epochs"),
            expect_int(spec_obj["examples"], "examples"),
            expect_int(spec_obj["batch_size"], "batch_size"))


def _parse_keras(spec_obj: dict, cluster: dict[str, list[Address]],
                 evaluator: Address | None) -> str | None:
    """``keras``: tf-keras, jax or absent. Keras 3 on JAX is one collective of chief and
    workers: no ps, no evaluator beside it (docs/keras.md)."""
    if spec_obj.get("keras") is None:
        return None
    keras = expect_str(spec_obj["keras"], "keras")
    if keras not in KERAS_ROUTES:
        raise fail("keras", f"unknown Keras {keras!r} (allowed: {', '.join(KERAS_ROUTES)})")
    if keras == KERAS_JAX:
        if "ps" in cluster:
            raise fail("keras", "jax runs chief and workers as one collective of JAX "
                                "processes: it has no parameter servers (remove cluster.ps)")
        if evaluator is not None:
            raise fail("keras", "jax runs chief and workers as one collective of JAX "
                                "processes: an evaluator cannot join it (remove evaluator; "
                                "evaluate in the script, or in a job of its own)")
        if "master" in cluster:
            raise fail("keras", "jax takes chief and workers, not the legacy master")
        if spec_obj.get("strategy", "multi_worker_mirrored") != "multi_worker_mirrored":
            raise fail("keras", "jax training is collective: every process takes each step "
                                "(strategy multi_worker_mirrored, the default; remove "
                                "strategy)")
    elif spec_obj.get("strategy") == "estimator":
        raise fail("keras", "tf-keras is for TensorFlow 2 strategies (multi_worker_mirrored, "
                            "parameter_server); an Estimator job runs on TensorFlow <= 2.15, "
                            "whose tf.keras is Keras 2 already")
    return keras


def _parse_strategy(spec_obj: dict, cluster: dict[str, list[Address]],
                    keras: str | None = None) -> str:
    n_trainers = sum(len(cluster.get(j, [])) for j in TRAINERS)
    inferred = ("multi_worker_mirrored" if "ps" not in cluster and
                (n_trainers > 1 or keras is not None)
                else "parameter_server" if keras is not None and "worker" in cluster
                else "estimator")
    strategy = expect_str(spec_obj.get("strategy", inferred), "strategy")
    if strategy not in STRATEGIES:
        raise fail("strategy", f"unknown strategy {strategy!r} (allowed: "
                               f"{', '.join(STRATEGIES)})")
    if strategy == "parameter_server" and ("ps" not in cluster or "worker" not in cluster):
        raise fail("strategy", "parameter_server needs at least one ps and one worker")
    if strategy == "multi_worker_mirrored" and "ps" in cluster:
        raise fail("strategy", "multi_worker_mirrored takes no ps (remove cluster.ps)")
    return strategy


def _parse_timeouts(raw: Any) -> dict[str, float]:
    timeouts = dict(TIMEOUT_DEFAULTS)
    given = expect_dict(raw, "timeouts")
    check_keys(given, tuple(TIMEOUT_DEFAULTS), "timeouts")
    for key, value in given.items():
        timeouts[key] = expect_number(value, f"timeouts.{key}")
    if timeouts["poll"] <= 0:
        raise fail("timeouts.poll", "must be greater than 0")
    return timeouts
