"""GPUs: find a host's devices with nvidia-smi and give each task its own (docs/gpus.md).

TensorFlow maps nearly all the memory of every GPU it can see, in every process
(tensorflow/tensorflow#3644): five tasks on one host each try to take every GPU. So on the
backends where the launcher starts processes itself (local, ssh, docker) every task gets a
disjoint set of devices through ``CUDA_VISIBLE_DEVICES``, and a task without GPUs an empty
one. Slurm and Kubernetes bind devices themselves (``--gpus``, ``nvidia.com/gpu``).

Plain data and pure functions: ``parse_query`` reads nvidia-smi's answer, ``assign`` decides
every task's devices from what each machine has and what each task asks (a count, a list,
sharing, or nothing: the defaults), ``apply`` writes the decision into the plan's tasks.
What each engine makes of a task's GPUs lives with the engine (launcher/backends/
docker_gpus.py, slurm_gpus.py).
"""

from __future__ import annotations

import os
import shutil
import subprocess
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from launcher.errors import UsageError
from orchestrator.roles import trainer_jobs

if TYPE_CHECKING:
    from launcher.plan import JobPlan
    from launcher.spec import Resources

# The one query the launcher makes; a stand-in (tests/nvidia_smi.py) answers exactly this.
QUERY = ["nvidia-smi", "--query-gpu=index,uuid,memory.total", "--format=csv,noheader,nounits"]
QUERY_TIMEOUT = 20.0
VISIBLE = "CUDA_VISIBLE_DEVICES"
ORDER = "CUDA_DEVICE_ORDER"   # PCI_BUS_ID: CUDA numbers devices as nvidia-smi does
GROWTH = "TF_FORCE_GPU_ALLOW_GROWTH"
# The tasks that train get a host's GPUs by default, in this order; the rest run on CPU.
ORDER_OF_ROLES = ("chief", "master", "worker", "evaluator", "ps")


class GpuError(UsageError):
    """GPUs asked for that a host does not have: exit 2, nothing started."""


@dataclass(frozen=True)
class Gpu:
    """One device as nvidia-smi lists it."""

    index: int
    uuid: str
    memory_mib: int | None = None


@dataclass(frozen=True)
class Machine:
    """One machine the launcher starts tasks on: its GPUs (None: no nvidia-smi there, or it
    failed) and the names of the tasks that run on it."""

    name: str
    gpus: tuple[Gpu, ...] | None
    tasks: tuple[str, ...]

    def has(self) -> str:
        """What the machine has, in words, for error lines."""
        if not self.gpus:
            return "no GPU (nvidia-smi found none)" if self.gpus is not None else \
                "no GPU (no nvidia-smi there, or it failed)"
        n = len(self.gpus)
        return f"{n} GPU{'s' if n > 1 else ''} ({', '.join(str(g.index) for g in self.gpus)})"


@dataclass(frozen=True)
class Ask:
    """What the spec asks for one task: ``count`` GPUs, the ``devices`` it names, or
    nothing (both None: the defaults); ``share``: it may share them (allow-growth)."""

    task: str
    role: str
    count: int | None = None
    devices: tuple[str, ...] | None = None
    share: bool = False


@dataclass(frozen=True)
class Placement:
    """A task's devices (CUDA_VISIBLE_DEVICES; empty: CPU) and whether it shares them."""

    devices: tuple[str, ...]
    share: bool = False

    @property
    def visible(self) -> str:
        return ",".join(self.devices)


# ---------------------------------------------------------------------------- discovery
def parse_query(text: str) -> tuple[Gpu, ...]:
    """nvidia-smi's answer to QUERY: one ``index, uuid, memory`` line per device.
    ValueError on anything else."""
    gpus = []
    for line in text.splitlines():
        if not line.strip():
            continue
        cells = [c.strip() for c in line.split(",")]
        if len(cells) != 3 or not cells[0].isdigit() or not cells[1]:
            raise ValueError(f"unexpected nvidia-smi line: {line.strip()[:120]!r}")
        memory = int(cells[2]) if cells[2].isdigit() else None
        gpus.append(Gpu(int(cells[0]), cells[1], memory))
    return tuple(gpus)


def restrict(gpus: tuple[Gpu, ...], visible: str | None) -> tuple[Gpu, ...]:
    """The devices a CUDA_VISIBLE_DEVICES value (the launcher's own) leaves to the job:
    indices or UUIDs, comma-separated; None leaves them all, "" none."""
    if visible is None:
        return gpus
    wanted = [v.strip() for v in visible.split(",") if v.strip()]
    return tuple(g for g in gpus if str(g.index) in wanted or g.uuid in wanted)


def discover_here(path: str | None = None) -> tuple[Gpu, ...] | None:
    """This machine's GPUs, or None where nvidia-smi is not on ``path`` (default: PATH) or
    fails (no driver): then the launcher places no devices, as before it knew of GPUs.
    A CUDA_VISIBLE_DEVICES the launcher was started with keeps the job to those."""
    program = shutil.which(QUERY[0], path=path)
    if program is None:
        return None
    try:
        done = subprocess.run([program, *QUERY[1:]], stdin=subprocess.DEVNULL,
                              capture_output=True, text=True, timeout=QUERY_TIMEOUT)
    except (OSError, subprocess.TimeoutExpired):
        return None
    if done.returncode != 0:
        return None
    try:
        gpus = parse_query(done.stdout)
    except ValueError:
        return None
    return restrict(gpus, os.environ.get(VISIBLE))


# ---------------------------------------------------------------------------- the asks
def ask_of(task: str, role: str, index: int, resources: Resources) -> Ask:
    """One task's Ask from its resources (resources.default overlaid with its role's):
    ``devices`` (one entry per task of the role) wins over a ``gpus`` count."""
    share = bool(resources.gpu_share)
    devices = resources.devices
    if devices is not None and index < len(devices):
        entry = str(devices[index])
        named = tuple(d.strip() for d in entry.split(",") if d.strip())
        return Ask(task, role, devices=named, share=share)
    return Ask(task, role, count=resources.gpus, share=share)


def _sorted(asks: Iterable[Ask]) -> list[Ask]:
    rank = {r: n for n, r in enumerate(ORDER_OF_ROLES)}
    return sorted(asks, key=lambda a: rank.get(a.role, len(rank)))


def listed(names: Sequence[str]) -> str:
    return ", ".join(names)


# ---------------------------------------------------------------------------- assignment
def assign(machines: Sequence[Machine], asks: Sequence[Ask],
           trainers: Sequence[str]) -> dict[str, Placement | None]:
    """Every task's devices, machine by machine (docs/gpus.md):

    - a task that names devices gets them; one that asks a count gets that many of the
      machine's free ones, the trainers first;
    - a task that says nothing: a trainer (a job of ``trainers``) gets an even share of
      what is left, the rest (ps, evaluator, ParameterServerStrategy's coordinator) none;
    - tasks that share (``gpu_share``) may be given the same devices as each other, never
      one another task has on its own;
    - on a machine without GPUs: None (nothing is set) for every task, unless one asks.

    GpuError, one line naming the machine, the tasks and what the machine has, when the
    asks cannot be met."""
    by_name = {a.task: a for a in asks}
    out: dict[str, Placement | None] = {}
    for machine in machines:
        mine = _sorted(by_name[t] for t in machine.tasks if t in by_name)
        out.update(_assign_machine(machine, mine, set(trainers)))
    return out


@dataclass
class Ledger:
    """One machine's assignment so far: who has which device alone, which devices a sharing
    task named, and every task's placement."""

    machine: Machine
    owner: dict[int, str] = field(default_factory=dict)   # device index -> its one task
    shared: set[int] = field(default_factory=set)         # devices a sharing task named
    out: dict[str, Placement | None] = field(default_factory=dict)

    def free(self) -> list[Gpu]:
        """The devices neither owned nor named by a sharing task, in index order."""
        return [g for g in self.machine.gpus or ()
                if g.index not in self.owner and g.index not in self.shared]

    def give(self, ask: Ask, take: Sequence[Gpu]) -> None:
        for g in take:
            self.owner[g.index] = ask.task
        self.out[ask.task] = Placement(tuple(str(g.index) for g in take))


def _assign_machine(machine: Machine, asks: list[Ask],
                    trainers: set[str]) -> dict[str, Placement | None]:
    """One machine's placements, in four named steps (each testable alone)."""
    if not machine.gpus:
        explicit = [a for a in asks if (a.devices or a.count)]
        if explicit:
            raise GpuError(_over_ask(machine, explicit))
        return {a.task: None for a in asks}
    ledger = Ledger(machine)
    named_devices(ledger, asks)
    counted_devices(ledger, asks)
    even_split(ledger, asks, trainers)
    shared_round_robin(ledger, asks, trainers)
    for a in asks:
        ledger.out.setdefault(a.task, Placement((), a.share))
    return ledger.out


def named_devices(ledger: Ledger, asks: Sequence[Ask]) -> None:
    """1. Devices named in the spec (``devices``): each to its task, never to two tasks
    unless both share on purpose."""
    machine = ledger.machine
    gpus = machine.gpus or ()
    by_key = {str(g.index): g for g in gpus} | {g.uuid: g for g in gpus}
    for a in asks:
        if a.devices is None:
            continue
        unknown = [d for d in a.devices if d not in by_key]
        if unknown:
            raise GpuError(f"host {machine.name} has no GPU {unknown[0]!r} ({a.task} asks for "
                           f"it in resources.{a.role}.devices); it has {machine.has()}")
        for d in a.devices:
            index = by_key[d].index
            other = ledger.owner.get(index)
            if other is not None or (not a.share and index in ledger.shared):
                other = other or "a task that shares it"
                raise GpuError(f"host {machine.name}: GPU {d} is given to both {other} and "
                               f"{a.task} (set gpu_share on both roles to share it on "
                               "purpose); it has " + machine.has())
            if a.share:
                ledger.shared.add(index)
            else:
                ledger.owner[index] = a.task
        ledger.out[a.task] = Placement(a.devices, a.share)


def counted_devices(ledger: Ledger, asks: Sequence[Ask]) -> None:
    """2. Counts (``gpus``), from the devices nobody named, in the order of the asks."""
    free = ledger.free()
    counted = [a for a in asks if a.devices is None and a.count is not None and not a.share]
    if sum(a.count or 0 for a in counted) > len(free):
        raise GpuError(_over_ask(ledger.machine, [a for a in counted if a.count]))
    for a in counted:
        take, free = free[:a.count or 0], free[a.count or 0:]
        ledger.give(a, take)


def even_split(ledger: Ledger, asks: Sequence[Ask], trainers: set[str]) -> None:
    """3. The defaults: the trainers that said nothing split what is left evenly (the
    first ones one more when it does not divide)."""
    even = [a for a in asks if a.devices is None and a.count is None
            and a.role in trainers and not a.share]
    if not even:
        return
    free = ledger.free()
    each, extra = divmod(len(free), len(even))
    for n, a in enumerate(even):
        k = each + (1 if n < extra else 0)
        take, free = free[:k], free[k:]
        ledger.give(a, take)


def _shares(ask: Ask, trainers: set[str]) -> bool:
    """A task that shares on purpose and asks a count, or a trainer that said nothing."""
    if ask.devices is not None or not ask.share:
        return False
    return bool(ask.count) or (ask.count is None and ask.role in trainers)


def shared_round_robin(ledger: Ledger, asks: Sequence[Ask], trainers: set[str]) -> None:
    """4. Sharing on purpose (``gpu_share`` with a count, or a trainer that said nothing):
    round-robin over the devices no task has alone."""
    sharing = [a for a in asks if _shares(a, trainers)]
    if not sharing:
        return
    pool = [g for g in ledger.machine.gpus or () if g.index not in ledger.owner]
    if not pool or any((a.count or 0) > len(pool) for a in sharing):
        raise GpuError(_over_ask(ledger.machine, sharing, pool))
    defaults = [a for a in sharing if a.count is None]
    each = max(1, len(pool) // max(1, len(defaults)))
    turn = 0
    for a in sharing:
        k = a.count or each
        take = sorted((pool[(turn + j) % len(pool)] for j in range(k)), key=lambda g: g.index)
        turn += k
        ledger.out[a.task] = Placement(tuple(str(g.index) for g in take), share=True)


def _over_ask(machine: Machine, asks: list[Ask], pool: list[Gpu] | None = None) -> str:
    parts = []
    for a in asks:
        what = f"GPU{'s' if len(a.devices) > 1 else ''} {','.join(a.devices)}" if a.devices else \
            f"{a.count or 1} GPU{'s' if (a.count or 1) > 1 else ''}"
        parts.append(f"{a.task} ({what})")
    total = sum(len(a.devices) if a.devices else (a.count or 1) for a in asks)
    left = ""
    if pool is not None:
        left = f", {len(pool)} not given to a task alone"
    return (f"host {machine.name}: {listed(parts)} ask for {total} GPU"
            f"{'s' if total > 1 else ''}, and it has {machine.has()}{left}; "
            "nothing was started")


# ---------------------------------------------------------------------------- the plan
def env_of(placement: Placement | None) -> dict[str, str]:
    """The variables a placement sets in a task's environment (none for None)."""
    if placement is None:
        return {}
    env = {VISIBLE: placement.visible}
    if placement.devices:
        env[ORDER] = "PCI_BUS_ID"
    if placement.share:
        env[GROWTH] = "true"
    return env


def asks_of(plan: JobPlan) -> list[Ask]:
    """What every task of the plan asks (its resources)."""
    return [ask_of(t.name, t.type, t.index, t.resources) for t in plan.tasks]


def path_of(plan: JobPlan) -> str | None:
    """Where nvidia-smi is looked for: the first task's PATH (the spec's env), else None
    (the launcher's)."""
    return next((t.env["PATH"] for t in plan.tasks if "PATH" in t.env), None)


def machines_here(plan: JobPlan, found: tuple[Gpu, ...] | None) -> list[Machine]:
    """Every task on this machine (local, docker), which has the GPUs ``found``."""
    return [Machine("localhost", found, tuple(t.name for t in plan.tasks))]


def answered(answer: Mapping[str, object] | None) -> tuple[Gpu, ...] | None:
    """A remote host's GPUs from its bootstrap's answer to QUERY (``{"status", "output"}``,
    None where it has no nvidia-smi): None unless nvidia-smi answered well."""
    if not answer or answer.get("status") != 0:
        return None
    try:
        return parse_query(str(answer.get("output", "")))
    except ValueError:
        return None


def machines_by_host(plan: JobPlan, answers: Mapping[str, Mapping[str, object] | None]
                     ) -> list[Machine]:
    """One machine per task host (ssh), its GPUs from that host's answer."""
    hosts: dict[str, list[str]] = {}
    for t in plan.tasks:
        hosts.setdefault(t.host, []).append(t.name)
    return [Machine(h, answered(answers.get(h)), tuple(ts)) for h, ts in hosts.items()]


def place(plan: JobPlan, machines: Sequence[Machine] | None) -> None:
    """Give every task of the plan its devices (``machines`` None: the backend binds them
    itself, or they are not known yet): ``TaskPlan.gpus`` and the task's environment.
    A restarted task keeps them: they live in its plan. GpuError when over-asked."""
    if machines is None:
        return
    placements = assign(machines, asks_of(plan), trainer_jobs(plan.strategy))
    for task in plan.tasks:
        placement = placements.get(task.name)
        task.gpus = list(placement.devices) if placement is not None else None
        task.env.update(env_of(placement))


def shown(devices: Sequence[str] | None) -> str:
    """A task's devices in a table cell: ``0,1``, ``none`` (CPU) or ``-`` (not placed)."""
    if devices is None:
        return "-"
    return ",".join(devices) if devices else "none"


def describe(machines: Sequence[Machine] | None, places: bool) -> list[str]:
    """--dry-run's lines about GPUs (none where no machine has any)."""
    if not places:
        return []
    if machines is None:
        return ["# GPUs: each host's are found with nvidia-smi when the job starts and given "
                "out then (plan.json, launch status); docs/gpus.md"]
    lines = []
    for m in machines:
        if m.gpus:
            lines.append(f"# GPUs on {m.name}: {m.has()}, found with nvidia-smi; tasks "
                         "that ask nothing: the trainers split them, the rest run on CPU "
                         "(docs/gpus.md)")
    return lines


def check_backend(places: bool, backend: str, resources: Mapping[str, Resources]) -> None:
    """``devices`` and ``gpu_share`` are for the backends that place GPUs themselves;
    SpecError (exit 2) naming the first such key on another backend."""
    if places:
        return
    from launcher.errors import SpecError

    for role, res in resources.items():
        for key, value in (("devices", res.devices), ("gpu_share", res.gpu_share)):
            if value is not None:
                raise SpecError(f"resources.{role}.{key}", f"backend {backend!r} binds GPUs "
                                "itself: give resources.ROLE.gpus (a count); devices and "
                                "gpu_share are for local, ssh and docker (docs/gpus.md)")
