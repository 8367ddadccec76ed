"""``Spec``: a validated cluster spec as plain data, each of its keys declared once as a
field (launcher/spec/declared.py: schema, default, description). The JSON Schema's
``FIELDS`` and ``DEFS`` come from these declarations."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from launcher.checks import Address, expect_argv
from launcher.spec.cluster import NAME_PATTERN
from launcher.spec.declared import REFS, declared, key, properties
from launcher.spec.resources import Resources, parse_resources
from launcher.spec.sections import (
    KERAS_ROUTES,
    RESTART_FIELDS,
    ROLE_FIELDS,
    STRATEGIES,
    MlflowSettings,
    RoleSettings,
    TensorBoardSettings,
    parse_env,
    parse_restart,
    parse_tensorboard,
    parse_tracking,
    per_role,
)
from launcher.spec.timeouts import Timeouts, parse_timeouts
from orchestrator.policies import POLICIES, RestartPolicy
from orchestrator.roles import trainer_jobs

TIMEOUT_FIELDS = properties(Timeouts)
ARGV = {"type": "array", "minItems": 1, "items": {"type": "string"}}
MLFLOW = {"type": "object", "additionalProperties": False,
          "properties": properties(MlflowSettings)}


@dataclass(kw_only=True)
class Spec:
    """A validated cluster spec. Plain data: print it, diff it, build plans from it."""

    name: str = key({"type": "string", "pattern": NAME_PATTERN},
                    "The job's name (default: the spec file's name).", hand=True)
    cluster: dict[str, list[Address]] = key(
        {"type": "object", "additionalProperties": False, "minProperties": 1,
         "properties": {"chief": {"$ref": "#/$defs/single"},
                        "master": {"$ref": "#/$defs/single"},
                        "worker": {"$ref": "#/$defs/tasks"}, "ps": {"$ref": "#/$defs/tasks"}},
         "anyOf": [{"required": ["chief"]}, {"required": ["master"]},
                   {"required": ["worker"]}],
         "not": {"required": ["chief", "master"]}},
        "TensorFlow's ClusterSpec shape: job name to a list of addresses, or a count of "
        "tasks on localhost.", required="job name to a list of addresses", hand=True)
    evaluator: Address | None = key(
        {"oneOf": [{"$ref": "#/$defs/address"}, {"type": "null"}]},
        "The evaluator's address (outside the cluster).", None, hand=True)
    command: list[str] = key(ARGV, "Every task's command (a role's own: roles).",
                             factory=list, parse=expect_argv)
    model_dir: str = key({"type": "string", "minLength": 1},
                         "A path or fsspec URL (file://, s3://, sftp://...) shared by every "
                         "task, ps included.", required="a path or fsspec URL shared by every "
                                                        "task")
    max_steps: int | None = key({"type": ["integer", "null"], "minimum": 1},
                                "The global step the job ends at.", None, hand=True)
    epochs: int | None = key({"type": "integer", "minimum": 1}, "Each example read this many "
                             "times by the whole cluster.", None, hand=True)
    examples: int | None = key({"type": "integer", "minimum": 1}, "Examples in one epoch.",
                               None, hand=True)
    batch_size: int | None = key({"type": "integer", "minimum": 1}, "Per trainer.", None,
                                 hand=True)
    backend: str = key({"enum": ["local"]}, "Where the tasks run (each backend's options: "
                       "its section).", "local", hand=True)
    strategy: str = key(
        {"enum": list(STRATEGIES)},
        "Who reads training data and what a global step is: estimator (chief and workers, "
        "asynchronous; default with a ps), parameter_server (TF2 PSS: the workers, "
        "asynchronous), multi_worker_mirrored (chief and workers, synchronous; default "
        "without a ps).", hand=True)
    keras: str | None = key(     # "tf-keras", "jax" or None (the script's own)
        {"enum": list(KERAS_ROUTES)},
        "The Keras the trainers run (docs/keras.md): tf-keras (Keras 2 through "
        "TF_USE_LEGACY_KERAS=1, checked to match TensorFlow where each task runs: Keras 3 "
        "cannot fit under MultiWorkerMirroredStrategy or ParameterServerStrategy), or jax "
        "(Keras 3 on JAX across processes: KERAS_BACKEND=jax and KERAS_DISTRIBUTION_* per "
        "process, chief and workers only, collective). Absent: the script's own Keras.",
        None, hand=True)
    env: dict[str, str] = key({"$ref": "#/$defs/env"}, "Every task's environment (besides "
                              "TF_CONFIG and TFCLUSTER_*).", factory=dict, parse=parse_env)
    roles: dict[str, RoleSettings] = key(
        {"type": "object", "additionalProperties": False, "properties": per_role("role")},
        "Per-role settings: a role's command and workdir replace the top-level ones, its "
        "env extends the top-level env. Arguments and env values expand $(VAR) from the "
        "task's environment (TFCLUSTER_TASK_TYPE, TFCLUSTER_TASK_INDEX, "
        "TFCLUSTER_<JOB>_HOSTS...), as Kubernetes does.", factory=dict, hand=True)
    workdir: str | None = key({"type": "string"}, "The tasks' working directory.", None)
    run_dir: str | None = key({"type": "string"}, "Where logs, events and the summary go "
                              "(default .tfcluster/runs/RUN_ID).", None)
    check_storage: bool = key({"type": "boolean"}, "Every task writes a probe into model_dir "
                              "from where it runs before training: a task that does not see "
                              "the same storage is refused.", True)
    tensorboard: TensorBoardSettings | None = key(
        {"oneOf": [{"type": "boolean"},
                   {"type": "object", "additionalProperties": False,
                    "properties": properties(TensorBoardSettings)}]},
        "TensorBoard on model_dir with the run, on the chief's host (local, ssh) or this "
        "machine; its URL is printed and shown by launch status; it ends with the run "
        "(docs/tensorboard.md).", None, parse=parse_tensorboard)
    tracking: MlflowSettings | None = key(
        {"type": "object", "additionalProperties": False, "properties": {"mlflow": MLFLOW}},
        "Log the run to an MLflow tracking server (docs/tracking.md); without it, "
        "$MLFLOW_TRACKING_URI turns tracking on.", None, parse=parse_tracking)
    # Estimator jobs: TF_CONFIG["model_dir"] = model_dir
    tf_config_model_dir: bool = key(
        {"type": "boolean"}, "Estimator jobs: put model_dir into every task's TF_CONFIG, "
        "where tf.estimator.RunConfig reads it (default true). A script that passes another "
        "model_dir string gets TensorFlow's mismatch error; false leaves TF_CONFIG without "
        "it.", True)
    timeouts: Timeouts = key({"type": "object", "additionalProperties": False,
                              "properties": TIMEOUT_FIELDS},
                             "Seconds (docs/reliability.md, docs/ending.md).",
                             factory=Timeouts, parse=parse_timeouts)
    restart: dict[str, RestartPolicy] = key(
        {"type": "object", "additionalProperties": False, "properties": per_role("restart")},
        "Per role: never, on-failure or always, max_restarts, backoff; the defaults follow "
        "TensorFlow's rules (docs/reliability.md).", factory=dict, parse=parse_restart)
    resources: dict[str, Resources] = key(
        {"type": "object", "additionalProperties": False,
         "properties": {"default": {"allOf": [{"$ref": "#/$defs/resources"},
                                              {"not": {"required": ["devices"]}}]},
                        **per_role("resources")}},
        "Per role (default: every role): what each task gets.", factory=dict,
        parse=parse_resources)
    # not keys: each backend's section (its options), and the file the spec came from
    backend_options: dict[str, dict[str, Any]] = field(default_factory=dict)
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


# ---------------------------------------------------------------- the JSON Schema's parts
# Besides these, each registered backend's name is a key: its options (launcher/backends).
FIELDS: dict[str, dict[str, Any]] = {"$schema": {"type": "string"},
                                     "description": {"type": "string"}, **properties(Spec)}
TOP_LEVEL_KEYS = tuple(FIELDS)
REQUIRED = tuple(f.name for f in declared(Spec) if f.metadata["required"])
TIMEOUTS = TIMEOUT_FIELDS
RESOURCE_FIELDS = properties(Resources)
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
    "seconds": REFS["#/$defs/seconds"],
    "restart": {"oneOf": [{"enum": list(POLICIES)},
                          {"type": "object", "additionalProperties": False,
                           "properties": RESTART_FIELDS}]},
    "resources": {"type": "object", "additionalProperties": False,
                  "not": {"required": ["gpus", "devices"]}, "properties": RESOURCE_FIELDS},
}
DEPENDENT_REQUIRED = {"epochs": ["examples", "batch_size"],
                      "examples": ["epochs", "batch_size"],
                      "batch_size": ["epochs", "examples"]}
