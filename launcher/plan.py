"""The job plan: after the spec, the only input of a run.

One TF_CONFIG, environment and command per task, and everything the run needs to end
well: timeouts, restart policies, per-task resources, the storage check setting, and
model_dir as the launcher reads it (launcher/model_dir.py). Plain data: --dry-run --json
and plan.json show it whole (secrets masked).

Before the plan exists, a backend learns what the job asks of it from a ``Reservation``
(``reservation(spec)``): enough to size a Slurm allocation or name Kubernetes' pods.
"""

from __future__ import annotations

import json
import math
import os
import signal
from dataclasses import asdict, dataclass, field
from typing import Any, Callable

from launcher import model_dir as model_dirs
from launcher.checks import Address
from launcher.expand import expand, expand_args
from launcher.spec import (
    KERAS_JAX,
    TF_KERAS,
    Resources,
    Spec,
    TensorBoardSettings,
    Timeouts,
    resources_for,
)
from orchestrator import preemption
from orchestrator.policies import RestartPolicy
from orchestrator.roles import host_port, in_start_order
from orchestrator.steps import derive_max_steps, keras_fit_steps


@dataclass
class TaskPlan:
    """Everything needed to start one task, on whatever backend."""

    type: str
    index: int
    host: str
    port: int
    command: list[str]
    env: dict[str, str]
    cwd: str | None = None
    auto_port: bool = False
    resources: Resources = field(default_factory=Resources)
    # the command as the spec gives it, before $(VAR) expansion (Kubernetes expands it in
    # the pod); None when it has nothing to expand
    raw_command: list[str] | None = None
    # the spec's own variables of this task, as written (Kubernetes puts them last in the
    # pod, for the kubelet to expand their $(VAR))
    raw_env: dict[str, str] = field(default_factory=dict)
    # the GPUs the launcher gave the task (CUDA_VISIBLE_DEVICES; [] none: CPU), None where
    # it places none (no GPU on the host, or the engine binds them): launcher/gpus.py
    gpus: list[str] | None = None

    @property
    def name(self) -> str:
        return f"{self.type}:{self.index}"

    @property
    def address(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"{host}:{self.port}"

    def to_dict(self) -> dict:
        return {"type": self.type, "index": self.index, "host": self.host, "port": self.port,
                "command": self.command, "env": self.env, "cwd": self.cwd,
                "auto_port": self.auto_port, "resources": self.resources.to_dict(),
                "gpus": self.gpus}


@dataclass
class JobPlan:
    """The whole job: tasks in start order, and what the job loop needs to end it well."""

    run_id: str
    name: str
    model_dir: str
    max_steps: int | None
    storage: model_dirs.ModelDir     # model_dir as the launcher reads it
    tasks: list[TaskPlan] = field(default_factory=list)
    strategy: str = "estimator"
    keras: str | None = None        # the spec's "keras": tf-keras, jax, or None
    backend: str = "local"
    timeouts: Timeouts = field(default_factory=Timeouts)
    restart: dict[str, RestartPolicy] = field(default_factory=dict)
    check_storage: bool = True
    tensorboard: TensorBoardSettings | None = None  # TensorBoard with the run
    # role -> the fewest of its tasks the job goes on with (roles.worker.minimum)
    minimum: dict[str, int] = field(default_factory=dict)
    workdir: str | None = None      # the spec's (every task's, unless its role has its own)
    run_dir: str | None = None      # where the run's files go, once the launcher knows it

    def task(self, type_: str, index: int = 0) -> TaskPlan:
        return next(t for t in self.tasks if t.type == type_ and t.index == index)

    @property
    def synchronous(self) -> bool:
        """Collective training (MultiWorkerMirroredStrategy): trainers step together."""
        return self.strategy == "multi_worker_mirrored"

    def to_dict(self) -> dict:
        return {"run_id": self.run_id, "name": self.name, "model_dir": self.model_dir,
                "max_steps": self.max_steps, "strategy": self.strategy,
                "keras": self.keras,
                "backend": self.backend, "timeouts": self.timeouts.to_dict(),
                "restart": {role: asdict(p) for role, p in self.restart.items()},
                "check_storage": self.check_storage,
                "storage": self.storage.to_dict(),
                "tensorboard": asdict(self.tensorboard) if self.tensorboard else None,
                "minimum": self.minimum, "tasks": [t.to_dict() for t in self.tasks]}

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), indent=2)


@dataclass(frozen=True)
class Reservation:
    """What a job asks of its backend before its plan exists, as plain data: the backend
    checks it and keeps what placement needs (``Backend.accept``), then acquires it
    (``Backend.prepare``: a Slurm allocation). ``reservation(spec)`` builds it."""

    name: str
    # (role, index, the spec's address) of every task: the cluster's jobs in the spec's
    # order, then the evaluator
    tasks: tuple[tuple[str, int, Address], ...]
    resources: dict[str, Resources] = field(default_factory=dict)  # the spec's section
    restart: dict[str, RestartPolicy] = field(default_factory=dict)     # the spec's own rules

    @property
    def roles(self) -> dict[str, int]:
        """Role -> number of tasks, in the order of ``tasks``."""
        out: dict[str, int] = {}
        for role, _, _ in self.tasks:
            out[role] = out.get(role, 0) + 1
        return out


def reservation(spec: Spec) -> Reservation:
    """The one way from a spec to what its backend is asked to reserve."""
    tasks = [(job, i, a) for job, addrs in spec.cluster.items() for i, a in enumerate(addrs)]
    if spec.evaluator is not None:
        tasks.append(("evaluator", 0, spec.evaluator))
    return Reservation(spec.name, tuple(tasks), dict(spec.resources), dict(spec.restart))


def max_steps_of(spec: Spec) -> int | None:
    """max_steps as given, or derived from epochs/examples/batch_size and the trainers."""
    if spec.max_steps is not None:
        return spec.max_steps
    if spec.epochs is None or spec.examples is None or spec.batch_size is None:
        return None
    if spec.keras == KERAS_JAX:
        return keras_fit_steps(spec.epochs, spec.examples, spec.batch_size,
                               len(spec.trainers))
    return derive_max_steps(spec.epochs, spec.examples, spec.batch_size,
                            num_shards=len(spec.trainers), synchronous=spec.synchronous)


def restart_policies(spec: Spec) -> dict[str, RestartPolicy]:
    """The restart policy of every role in the job: the spec's, else the default."""
    from orchestrator.policies import policy_of

    roles = list(spec.cluster) + (["evaluator"] if spec.evaluator is not None else [])
    return {role: policy_of(role, spec.restart) for role in roles}


def new_run_id(name: str) -> str:
    return f"{name}-{os.urandom(4).hex()}"


def tf_config(cluster: dict[str, list[str]] | str, task_type: str, index: int,
              model_dir: str | None = None) -> str:
    """TF_CONFIG for one task: the evaluator stays outside the cluster, as TensorFlow expects.
    ``model_dir`` (Estimator jobs) is what ``tf.estimator.RunConfig`` takes when the script
    gives none; one it gives must be the very same string, or RunConfig raises ValueError.
    ``cluster`` may come as its JSON already (``compact``): one encoding for every task of
    a large job, not one each."""
    rest: dict = {"task": {"type": task_type, "index": index}}
    if model_dir is not None:
        rest["model_dir"] = model_dir
    shared = cluster if isinstance(cluster, str) else compact(cluster)
    return '{"cluster":' + shared + "," + compact(rest)[1:]


def compact(doc: Any) -> str:
    """JSON without spaces, as TF_CONFIG is written."""
    return json.dumps(doc, separators=(",", ":"))


@dataclass(frozen=True)
class NoticeRoute:
    """How a preemption notice reaches a backend's tasks: ``signals`` the in-task handler
    answers (orchestrator/preemption.py: ``URG`` from the launcher; ``URG,TERM`` where the
    engine's SIGTERM is the notice), ``site`` the folder of its ``sitecustomize`` where the
    tasks run (None: this machine's, then the launcher's own PYTHONPATH follows it)."""

    signals: str = "URG"
    site: str | None = None
    sends: int = signal.SIGURG      # what the launcher sends the savers


RUN_ID = "TFCLUSTER_RUN_ID"      # in every task's environment: the run's processes carry it
IMAGE_SITE = "/opt/tfcluster/orchestrator/preempt_site"    # in tfcluster's image
SITE_HERE = os.path.join(os.path.dirname(os.path.abspath(preemption.__file__)), "preempt_site")


def preemption_env(spec: Spec, role: str, env: dict[str, str],
                   notice: NoticeRoute | None) -> dict[str, str]:
    """What arms the preemption notice in a task (docs/preemption.md): its signals, the
    ps's grace, and the notice's ``sitecustomize`` first on PYTHONPATH, before the spec's
    PYTHONPATH (or, for tasks of this machine's filesystem, the launcher's). Nothing when
    ``timeouts.preempt`` is 0 or the trainers are MultiWorkerMirrored (TensorFlow's own
    PreemptionCheckpointHandler answers SIGTERM there)."""
    if notice is None or not spec.timeouts.preempt or spec.synchronous:
        return {}
    site = notice.site or SITE_HERE
    rest = env.get("PYTHONPATH") or (os.environ.get("PYTHONPATH", "") if notice.site is None
                                     else "")
    return {preemption.ENV: notice.signals,
            preemption.GRACE_ENV: f"{spec.timeouts.preempt:g}",
            "PYTHONPATH": os.pathsep.join(p for p in (site, rest) if p)}


def grace_period(timeouts: Timeouts) -> int | None:
    """A pod's terminationGracePeriodSeconds, a compose service's stop_grace_period: the
    preemption notice's bound (``timeouts.preempt``: the chief saves, the ps serve on) and
    then the stop's (``timeouts.kill``); None (the engine's default) when the notice is
    off."""
    if not timeouts.preempt:
        return None
    return int(math.ceil(timeouts.preempt + timeouts.kill))


def keras_env(spec: Spec, shard: int | None, cluster: dict[str, list[str]]
              ) -> dict[str, str]:
    """What the spec's ``keras`` route tells a task (docs/keras.md): tf-keras sets
    ``TF_USE_LEGACY_KERAS=1`` (``tf.keras`` is then Keras 2); jax gives each process its
    place in the JAX collective as ``keras.distribution.initialize()`` reads it: every
    trainer's address in shard order (the first, chief or worker 0, is JAX's coordinator:
    its own port, reserved for it as for a TF server), their number and its own index."""
    if spec.keras == TF_KERAS:
        return {"TF_USE_LEGACY_KERAS": "1"}
    if spec.keras != KERAS_JAX or shard is None:
        return {}
    addresses = [cluster[job][i] for job, i in spec.trainers]
    return {"KERAS_BACKEND": "jax",
            "KERAS_DISTRIBUTION_JOB_ADDRESSES": ",".join(addresses),
            "KERAS_DISTRIBUTION_NUM_PROCESSES": str(len(addresses)),
            "KERAS_DISTRIBUTION_PROCESS_ID": str(shard)}


def training_env(spec: Spec, max_steps: int | None, shard: int | None,
                 shards: int) -> dict[str, str]:
    """What a task is told of the training: max_steps, its shard (a trainer's), the
    epochs."""
    env = {}
    if max_steps is not None:
        env["TFCLUSTER_MAX_STEPS"] = str(max_steps)
    if shard is not None:
        env["TFCLUSTER_SHARD_INDEX"] = str(shard)
        env["TFCLUSTER_NUM_SHARDS"] = str(shards)
    if spec.epochs is not None:
        env["TFCLUSTER_EPOCHS"] = str(spec.epochs)
        env["TFCLUSTER_EXAMPLES"] = str(spec.examples)
        env["TFCLUSTER_BATCH_SIZE"] = str(spec.batch_size)
    return env


def build_plan(
    spec: Spec,
    port_for: Callable[[str], int],
    place: Callable[[str, int, Address], Address] = lambda role, index, address: address,
    command: list[str] | None = None,
    run_id: str | None = None,
    base_env: dict[str, str] | None = None,
    backend: str | None = None,
    notice: NoticeRoute | None = None,
) -> JobPlan:
    """Resolve hosts and ports and give every task its TF_CONFIG, environment and command.

    ``place(role, index, address)`` is where the backend puts the task whose spec address
    that is (``Backend.place``: ``--local`` maps every host to localhost, Slurm a label to
    its node); ``port_for(host)`` picks a free port for an address placed without one.
    ``notice``: how a preemption notice reaches the tasks on this backend
    (``preemption_env``).
    """
    run_id = run_id or new_run_id(spec.name)
    max_steps = max_steps_of(spec)
    missing = [r for r in spec.role_names if not spec.command_for(r, command)]
    if missing:
        raise ValueError(f"no command for {missing[0]}: give one in the spec or after --")

    def resolve(job: str, i: int, addr: Address) -> tuple[str, int, bool]:
        placed = place(job, i, addr)
        if placed.port is not None:
            return placed.host, placed.port, False
        return placed.host, port_for(placed.host), True

    roles: list[tuple[str, int, Address]] = in_start_order(spec.cluster, spec.evaluator)
    resolved = {(job, i): resolve(job, i, a) for job, i, a in roles}

    cluster = {job: [host_port(*resolved[(job, i)][:2]) for i in range(len(spec.cluster[job]))]
               for job in spec.cluster}
    trainers = spec.trainers
    shard_of = {t: n for n, t in enumerate(trainers)}
    cluster_json = compact(cluster)         # once, not once per task
    # Keras (PSS, MWMS) ignores TF_CONFIG["model_dir"]; the Estimator reads it.
    tf_model_dir = spec.model_dir if spec.strategy == "estimator" and \
        spec.tf_config_model_dir else None
    hosts_env = {f"TFCLUSTER_{job.upper()}_HOSTS": ",".join(addrs)
                 for job, addrs in cluster.items()}

    tasks = []
    for job, i, _ in roles:
        host, port, auto = resolved[(job, i)]
        env = {"TF_CPP_MIN_LOG_LEVEL": "2", "PYTHONUNBUFFERED": "1"}
        env.update(base_env or {})
        ours = {
            "TF_CONFIG": tf_config(cluster_json, job, i, tf_model_dir),
            RUN_ID: run_id,
            "TFCLUSTER_MODEL_DIR": spec.model_dir,
            "TFCLUSTER_TASK": f"{job}:{i}",
            "TFCLUSTER_TASK_TYPE": job,
            "TFCLUSTER_TASK_INDEX": str(i),
            **hosts_env,
        }
        # the spec's values may name ours: "JOB_NAME": "$(TFCLUSTER_TASK_TYPE)"
        env.update({k: expand(v, ours) for k, v in spec.env_for(job).items()})
        env.update(ours)
        env.update(training_env(spec, max_steps, shard_of.get((job, i)), len(trainers)))
        env.update(keras_env(spec, shard_of.get((job, i)), cluster))
        env.update(preemption_env(spec, job, env, notice))
        argv = spec.command_for(job, command)
        expanded = expand_args(argv, env)
        tasks.append(TaskPlan(job, i, host, port, expanded, env, spec.workdir_for(job), auto,
                              resources_for(spec.resources, job),
                              raw_command=argv if expanded != argv else None,
                              raw_env=spec.env_for(job)))
    return JobPlan(run_id, spec.name, spec.model_dir, max_steps,
                   model_dirs.resolve(spec.model_dir, spec.workdir, spec.env,
                                      spec.keras == KERAS_JAX), tasks,
                   spec.strategy, spec.keras, backend=backend or spec.backend,
                   timeouts=spec.timeouts, restart=restart_policies(spec),
                   check_storage=spec.check_storage, tensorboard=spec.tensorboard,
                   minimum={role: r.minimum for role, r in spec.roles.items()
                            if r.minimum is not None},
                   workdir=spec.workdir)

