"""The spec's sections that are more than one value: ``env``, ``roles``, ``restart``,
``tensorboard``, ``tracking``; each parsed into plain data, one clear error per mistake."""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any, Callable

from launcher.checks import (
    Address,
    check_keys,
    expect_argv,
    expect_dict,
    expect_int,
    expect_str,
    experiment_problem,
    fail,
    tracking_uri_problem,
    type_name,
)
from launcher.spec.declared import declared, key, parse_section, properties
from orchestrator.policies import DEFAULTS, NEVER, ON_FAILURE, POLICIES, RestartPolicy
from orchestrator.roles import ROLES

STRATEGIES = ("estimator", "parameter_server", "multi_worker_mirrored")
# "keras": which Keras the trainers run (docs/keras.md). Absent: the script's own.
TF_KERAS, KERAS_JAX = "tf-keras", "jax"
KERAS_ROUTES = (TF_KERAS, KERAS_JAX)


def per_role(ref: str, roles: tuple[str, ...] = ROLES) -> dict[str, Any]:
    return {role: {"$ref": f"#/$defs/{ref}"} for role in roles}


@dataclass(frozen=True)
class TensorBoardSettings:
    """``"tensorboard": true`` or ``{"port": N}``: TensorBoard on model_dir with the run
    (launcher/tensorboard.py); port None: a free one."""

    port: int | None = key({"type": "integer", "minimum": 1, "maximum": 65535}, "", None,
                           nullable=True)


def _checked(problem_of: Callable[[str], str | None]) -> Callable[[Any, str], str]:
    """A string key's parser: a string, then ``problem_of``'s words when it has any."""
    def parse(value: Any, where: str) -> str:
        text = expect_str(value, where)
        problem = problem_of(text)
        if problem:
            raise fail(where, problem)
        return text
    return parse


def _tags(value: Any, where: str) -> dict[str, str]:
    tags = expect_dict(value, where)
    for name, text in tags.items():
        expect_str(text, f"{where}.{name}", allow_empty=True)
    return dict(tags)


@dataclass(frozen=True)
class MlflowSettings:
    """``"tracking": {"mlflow": {...}}``: where the run is logged (launcher/tracking/); None
    fields fall back to the environment ($MLFLOW_TRACKING_URI, $MLFLOW_EXPERIMENT_NAME)."""

    tracking_uri: str | None = key(
        {"type": "string", "pattern": "^[Hh][Tt][Tt][Pp][Ss]?://"},
        "The server's http(s) URL (default $MLFLOW_TRACKING_URI).", None,
        parse=_checked(tracking_uri_problem))
    experiment: str | None = key(
        {"type": "string", "minLength": 1, "maxLength": 500},
        "Default $MLFLOW_EXPERIMENT_NAME, else the spec's name.", None,
        parse=_checked(experiment_problem))
    run_name: str | None = key({"type": "string", "minLength": 1}, "", None)
    tags: dict[str, str] = key({"type": "object", "additionalProperties": {"type": "string"}},
                               "", factory=dict, parse=_tags)


def parse_env(raw: Any, where: str) -> dict[str, str]:
    env: dict[str, str] = {}
    for name, value in expect_dict(raw, where).items():
        if not re.match(r"^[A-Za-z_][A-Za-z0-9_]*$", name):
            raise fail(f"{where}.{name}", "is not a valid environment variable name")
        if name == "TF_CONFIG" or name.startswith("TFCLUSTER_"):
            raise fail(f"{where}.{name}", "is set by tfcluster for every task; do not set it")
        if name == "CUDA_VISIBLE_DEVICES":
            raise fail(f"{where}.{name}", "is set by tfcluster for every task from its "
                                           "resources: give resources.ROLE.gpus or .devices "
                                           "(docs/gpus.md)")
        env[name] = expect_str(value, f"{where}.{name}", allow_empty=True)
    return env


@dataclass(frozen=True)
class RoleSettings:
    """One role's own command, environment and working directory (``"roles": {"ps": ...}``):
    each replaces (``env``: extends) the top-level value for that role's tasks. ``minimum``
    (workers of asynchronous training only): the fewest workers the job goes on with when
    some cannot come back (docs/reliability.md, "Elastic workers")."""

    command: list[str] | None = key(
        {"type": "array", "minItems": 1, "items": {"type": "string"}},
        "the role's own command (replaces the top-level one)", None, parse=expect_argv)
    env: dict[str, str] = key({"$ref": "#/$defs/env"}, "extends the top-level env",
                              factory=dict, parse=parse_env)
    workdir: str | None = key({"type": "string"}, "the role's own working directory", None)
    minimum: int | None = key(
        {"type": "integer", "minimum": 0},
        "roles.worker only, asynchronous training (parameter_server, or estimator with a "
        "ps): the fewest workers the job goes on with. A worker that cannot come back (its "
        "restarts spent, its host unreachable) no longer ends the job while this many are "
        "left; it is started again once its host answers again (docs/reliability.md).",
        None)


ROLE_FIELDS = properties(RoleSettings)
ROLE_KEYS = tuple(f.name for f in declared(RoleSettings))  # what "roles": {ROLE: {...}} sets


def _policy(value: str, where: str) -> str:
    if value not in POLICIES:
        raise fail(where, f"must be one of {', '.join(POLICIES)}, got {value!r}")
    return value


@dataclass(frozen=True)
class RestartSettings:
    """One role's ``restart`` entry as given (a bare string is its policy). None: left
    out; its default depends on the role and the policy, so ``parse_restart`` fills it."""

    policy: str | None = key({"enum": list(POLICIES)}, "when a task of the role restarts",
                             None, parse=expect_str, check=_policy)
    max_restarts: int | None = key({"type": "integer", "minimum": 0}, "restarts before the "
                                   "role's loss ends the job (default 3, never: 0)", None)
    backoff: float | None = key({"type": "number", "minimum": 0},
                                "seconds before a restart (default 1)", None)


RESTART_FIELDS = properties(RestartSettings)


def parse_roles(raw: Any, cluster: dict[str, list[Address]], evaluator: Address | None,
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
        out[role] = settings = parse_section(RoleSettings, value, where)
        if settings.minimum is not None:
            _check_minimum(settings.minimum, role, cluster, strategy)
    return out


def _check_minimum(minimum: int, role: str, cluster: dict[str, list[Address]],
                   strategy: str) -> None:
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
    expect_int(minimum, where, minimum=1 if strategy == "parameter_server" else 0)
    count = len(cluster[role])
    if minimum > count:
        raise fail(where, f"{minimum} is more than the {count} worker task"
                          f"{'s' if count != 1 else ''} of cluster.worker")


def parse_restart(raw: Any, where: str = "restart") -> dict[str, RestartPolicy]:
    restart = expect_dict(raw, where)
    check_keys(restart, ROLES, where)
    out = {}
    for role, value in restart.items():
        at = f"{where}.{role}"
        given = parse_section(RestartSettings,
                              {"policy": value} if isinstance(value, str) else value, at)
        policy = given.policy or ON_FAILURE
        default = DEFAULTS[role]
        max_restarts = given.max_restarts
        if max_restarts is None:
            max_restarts = 0 if policy == NEVER else default.max_restarts
        backoff = default.backoff if given.backoff is None else given.backoff
        out[role] = RestartPolicy(policy, max_restarts, backoff)
    return out


def parse_tensorboard(raw: Any, where: str = "tensorboard") -> TensorBoardSettings | None:
    if raw is None or raw is False:
        return None
    if raw is True:
        return TensorBoardSettings()
    if not isinstance(raw, dict):
        raise fail(where, 'must be true, false or {"port": N}, got '
                          f"{type_name(raw)}")
    return parse_section(TensorBoardSettings, raw, where)


def parse_tracking(raw: Any, where: str = "tracking") -> MlflowSettings | None:
    """``"tracking": {"mlflow": {...}}``: checked here; the environment's URI when the spec
    gives none is checked where the run starts (launcher/tracking/)."""
    if raw is None:
        return None
    check_keys(expect_dict(raw, where), ("mlflow",), where)
    if "mlflow" not in raw:
        return None
    return parse_section(MlflowSettings, raw["mlflow"], f"{where}.mlflow")
