"""What the Slurm backend asks Slurm for, as plain data: the spec's ``slurm`` section, the
allocation (one node per host label of the spec, sized for its busiest node) as salloc's
and sbatch's options, each task's ``srun`` step, and the lines ``--dry-run`` prints of them
(``StepLines``: ``describe`` and a detached run's batch request render the same object)."""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field

from launcher.errors import SpecError
from launcher.plan import Reservation, TaskPlan
from launcher.spec import ROLES, Resources, resources_for
from launcher.spec.declared import STRING, STRINGS, flags, key, line, word

DEFAULT_SIGNAL_LEAD = 120          # seconds before the time limit for the warning signal
_UNITS_MB = {"": 1, "K": 1 / 1024, "M": 1, "G": 1024, "T": 1024 * 1024}


@dataclass(frozen=True)
class SlurmOptions:
    """The spec's ``slurm`` section."""

    partition: str | None = key(STRING, "the allocation's partition", None, parse=word)
    account: str | None = key(STRING, "account to charge", None, parse=word)
    qos: str | None = key(STRING, "quality of service", None, parse=word)
    time: str | None = key(STRING, "time limit of the allocation", None, parse=word)
    nodelist: str | None = key(STRING, "nodes to run on", None, parse=word)
    constraint: str | None = key(STRING, "node features required", None, parse=word)
    allocation_timeout: float | None = key({"type": "number", "minimum": 1},
                                           "seconds to wait for the allocation", None)
    salloc_args: list[str] = key(STRINGS, "more salloc options (--name=value)", factory=list,
                                 parse=flags)
    srun_args: list[str] = key(STRINGS, "more srun options (--name=value)", factory=list,
                               parse=flags)
    signal_lead: int = key({"type": "integer", "minimum": 1}, "--detach: the warning signal "
                           "this many seconds before the time limit", DEFAULT_SIGNAL_LEAD)
    steps: str = key({"enum": ["node", "task"]}, "node: one job step per node runs that "
                     "node's tasks (a task with GPUs keeps its own step); task: one step per "
                     "task", "node")
    python: str | None = key(STRING, "the node step's interpreter (default: the task's own "
                             "Python, else python3)", None, parse=line)


def memory_mb(text: str) -> int:
    """'4G', '512M', '2Gi', '1000' (MB, Slurm's default unit) in MB."""
    m = re.match(r"^(\d+(?:\.\d+)?)([KMGT]?)i?$", text)
    if not m:
        raise ValueError(f"bad memory size {text!r}")
    return max(1, int(float(m.group(1)) * _UNITS_MB[m.group(2)]))


@dataclass(frozen=True)
class Allocation:
    """The job's allocation: the spec's host labels, one node each (the chief's first),
    which label each task has, and the size and place as salloc's and sbatch's options."""

    labels: tuple[str, ...] = ()
    label_of: dict[tuple[str, int], str] = field(default_factory=dict)  # (role, i) -> label
    options: tuple[str, ...] = ()

    def salloc_argv(self, o: SlurmOptions) -> list[str]:
        argv = ["salloc", "--no-shell", *self.options]
        if o.allocation_timeout:
            argv.append(f"--immediate={int(o.allocation_timeout)}")
        return argv + list(o.salloc_args)


def allocation_for(reservation: Reservation, o: SlurmOptions) -> Allocation:
    """One node per distinct host label (the chief's first), sized for its busiest node;
    SpecError for what one allocation cannot be."""
    _check_allocation_level(reservation.resources, o)
    order = {"chief": 0, "master": 0, "worker": 1, "ps": 2, "evaluator": 3}
    by_role = sorted(reservation.tasks, key=lambda t: order[t[0]])
    labels = tuple(dict.fromkeys(a.host for _, _, a in by_role))
    label_of = {(role, i): a.host for role, i, a in reservation.tasks}
    per_label: dict[str, dict[str, int]] = {h: {"cpus": 0, "mem": 0, "gpus": 0}
                                            for h in labels}
    for (role, _), label in label_of.items():
        res = resources_for(reservation.resources, role)
        per_label[label]["cpus"] += 1 if res.cpus is None else res.cpus
        per_label[label]["gpus"] += res.gpus or 0
        if res.memory is not None:
            per_label[label]["mem"] += memory_mb(res.memory)
    default = reservation.resources.get("default", Resources())
    argv = [f"--job-name=tfc-{reservation.name}",
            f"--nodes={len(labels)}", "--ntasks-per-node=1",
            f"--cpus-per-task={max(v['cpus'] for v in per_label.values()) or 1}"]
    mem = max(v["mem"] for v in per_label.values())
    gpus = max(v["gpus"] for v in per_label.values())
    if mem:
        argv.append(f"--mem={mem}M")
    if gpus:
        argv.append(f"--gpus-per-node={gpus}")
    for flag, value in (("partition", o.partition or default.partition),
                        ("time", o.time or default.time),
                        ("account", o.account), ("qos", o.qos),
                        ("nodelist", o.nodelist), ("constraint", o.constraint)):
        if value:
            argv.append(f"--{flag}={value}")
    return Allocation(labels, label_of, tuple(argv))


def _check_allocation_level(resources: Mapping[str, Resources], o: SlurmOptions) -> None:
    """One allocation has one partition and one time limit: a role may not differ."""
    default = resources.get("default", Resources())
    for name, given, of in (("partition", o.partition, lambda r: r.partition),
                            ("time", o.time, lambda r: r.time)):
        wanted = given or of(default)
        for role in ROLES:
            value = of(resources.get(role, Resources()))
            if value is not None and value != wanted:
                raise SpecError(f"resources.{role}.{name}",
                                f"the Slurm backend runs every task in one allocation with "
                                f"one {name}: set it in slurm.{name} or resources.default."
                                f"{name}, not per role")
    for res in resources.values():
        if res.memory is not None:
            memory_mb(res.memory)


def step_argv(job_id: str, node: str, name: str, cpus: int, mem: int | None) -> list[str]:
    """``srun`` of one step in the allocation, on one node, beside the other steps."""
    argv = ["srun", f"--jobid={job_id}", f"--nodelist={node}", "--nodes=1", "--ntasks=1",
            "--overlap", f"--job-name={name}", f"--cpus-per-task={cpus}", "--export=ALL",
            "--kill-on-bad-exit=1"]
    return argv + ([f"--mem={mem}M"] if mem else [])


def node_step_size(tasks: list[TaskPlan]) -> tuple[int, int | None]:
    """A node step's CPUs and memory in MB, summed over its tasks as the allocation sums
    them (memory only when every task gives it)."""
    cpus = sum(1 if t.resources.cpus is None else t.resources.cpus for t in tasks) or 1
    memory = [t.resources.memory for t in tasks]
    return cpus, (sum(memory_mb(m) for m in memory if m is not None)
                  if None not in memory else None)


def srun_argv(o: SlurmOptions, task: TaskPlan, job_id: str, node: str) -> list[str]:
    """The step of one task (``steps: task``, or a task with GPUs)."""
    res = task.resources
    argv = step_argv(job_id, node, f"{task.type}-{task.index}", res.cpus or 1,
                     memory_mb(res.memory) if res.memory is not None else None)
    if res.gpus:
        argv.append(f"--gpus={res.gpus}")
    if task.cwd:
        argv.append(f"--chdir={task.cwd}")
    return argv + list(o.srun_args) + ["--", *task.command]


def grouped(o: SlurmOptions, task: TaskPlan) -> bool:
    """Run by its node's step: ``steps: node`` and no GPUs (Slurm binds a task's GPUs to a
    step of its own)."""
    return o.steps == "node" and not task.resources.gpus


@dataclass(frozen=True)
class StepLines:
    """What ``--dry-run`` shows of a Slurm run, as lines: how it is asked for (``head``,
    ``salloc``), its job steps, and its end. A detached run's batch request shows the
    steps alone."""

    head: tuple[str, ...]
    salloc: str
    steps: tuple[str, ...]
    end: tuple[str, ...] = ("# when training ends: SIGTERM to each ps and evaluator (then "
                            "SIGKILL), then", "scancel $J")

    def text(self) -> str:
        return "\n".join([*self.head, self.salloc, *self.steps, *self.end])
