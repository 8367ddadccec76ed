"""TensorFlow's roles, defined once: job names, who trains, the start order, the primary
task, a task's address in TF_CONFIG.

Plain data, no launcher import: the spec parser, the plan, the backends, the job loop and
the coordinator all take their roles from here.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Protocol, TypeVar

JOB_NAMES = ("chief", "master", "worker", "ps")   # what TF_CONFIG["cluster"] may hold
ROLES = JOB_NAMES + ("evaluator",)                 # the evaluator stays outside the cluster
TRAINERS = ("chief", "master", "worker")           # tasks that run training steps
START_ORDER = ("ps", "chief", "master", "worker", "evaluator")
PRIMARY_ORDER = ("chief", "master", "worker")      # whose exit 0 means "training finished"

T = TypeVar("T")


class Named(Protocol):
    @property
    def name(self) -> str: ...      # "chief:0"


N = TypeVar("N", bound=Named)


def primary_task(tasks: Iterable[N]) -> N | None:
    """The primary task: chief:0, else master:0, else worker:0 (whose exit 0 means
    "training finished"; TensorBoard runs beside it); None without a trainer."""
    by_name = {t.name: t for t in tasks}
    return next((by_name[f"{job}:0"] for job in PRIMARY_ORDER if f"{job}:0" in by_name), None)


def host_port(host: str, port: int) -> str:
    """'host:port' as TF_CONFIG gives an address, an IPv6 host in brackets."""
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


def split_address(address: str) -> tuple[str, int]:
    """("host", port) of "host:port" or "[v6]:port" (``host_port``'s inverse); ValueError
    when the port is not a number."""
    host, _, port = address.rpartition(":")
    return host.strip("[]"), int(port)


def in_start_order(cluster: Mapping[str, Sequence[T]],
                   evaluator: T | None = None) -> list[tuple[str, int, T]]:
    """(job, index, entry) of every task, in the order tasks start: ps first (trainers
    wait for them), then chief, workers, and the evaluator last."""
    out = [(job, i, entry) for job in START_ORDER if job in cluster
           for i, entry in enumerate(cluster[job])]
    if evaluator is not None:
        out.append(("evaluator", 0, evaluator))
    return out


def trainer_jobs(strategy: str) -> tuple[str, ...]:
    """The jobs that read training data, in shard order. Under ParameterServerStrategy the
    chief only coordinates: the workers alone read."""
    return ("worker",) if strategy == "parameter_server" else TRAINERS


NAMES_SHOWN = 6     # task names listed in a line; more are counted per role


def role_counts(names: Sequence[str]) -> str:
    """'chief 1, worker 1000, ps 50': how many tasks ("role:index") of each role, in the
    order the roles first appear."""
    counts: dict[str, int] = {}
    for name in names:
        role = name.split(":")[0]
        counts[role] = counts.get(role, 0) + 1
    return ", ".join(f"{role} {n}" for role, n in counts.items())


def names_text(names: Sequence[str]) -> str:
    """Task names for a line of text: all of them up to NAMES_SHOWN, else the first ones,
    how many more and how many of each role ("worker:0, ..., and 994 more (worker 1000)")."""
    if len(names) <= NAMES_SHOWN:
        return ", ".join(names)
    return (f"{', '.join(names[:NAMES_SHOWN])} and {len(names) - NAMES_SHOWN} more "
            f"({role_counts(names)})")
