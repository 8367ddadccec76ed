"""``resources``: what each task of a role gets (``resources.default`` for every role),
declared once (launcher/spec/declared.py). The rules between fields (``devices`` per role
and not beside ``gpus``, one entry per task) are written here by hand."""

from __future__ import annotations

import dataclasses
import re
from dataclasses import dataclass
from typing import Any

from launcher.checks import Address, check_keys, expect_dict, expect_str, fail
from launcher.spec.declared import Keyed, declared, key, parse_section
from orchestrator.roles import ROLES

_DEVICE_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9/-]*$")   # an index or a UUID (GPU-..., MIG-...)
COUNT = {"type": "integer", "minimum": 0}
TEXT = {"type": "string"}


def parse_devices(raw: Any, where: str) -> list[str]:
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


@dataclass(frozen=True)
class Resources(Keyed):
    """One role's resources; None: not given (the engine's own default)."""

    cpus: int | None = key(COUNT, "CPUs per task (Slurm, Kubernetes, docker)", None)
    gpus: int | None = key(COUNT, "GPUs per task: CUDA_VISIBLE_DEVICES on local, ssh and "
                                  "docker, --gpus on Slurm, nvidia.com/gpu on Kubernetes "
                                  "(docs/gpus.md)", None)
    devices: list[str] | None = key(
        {"type": "array", "minItems": 1, "items": {
            "type": ["string", "integer"], "minimum": 0,
            "pattern": "^([A-Za-z0-9][A-Za-z0-9/-]*(,[A-Za-z0-9][A-Za-z0-9/-]*)*)?$"}},
        "local, ssh, docker: each task's GPUs, one entry per task of the role (\"0,1\", a "
        "UUID, \"\" for none); not in resources.default", None, parse=parse_devices)
    gpu_share: bool | None = key({"type": "boolean"}, "the role's tasks may share GPUs with "
                                 "each other (TF_FORCE_GPU_ALLOW_GROWTH=true): one GPU for "
                                 "several tasks on a development machine", None)
    memory: str | None = key({"type": "string", "pattern": "^[0-9]+(\\.[0-9]+)?([KMGT]i?)?$"},
                             "memory per task: '4G', '512M', '2Gi' (Slurm, Kubernetes, "
                             "docker)", None, problem="must look like '4G', '512M' or '2Gi'")
    partition: str | None = key(TEXT, "the role's Slurm partition", None)
    time: str | None = key(TEXT, "the role's Slurm time limit", None)

    def over(self, base: Resources) -> Resources:
        """``base`` with what this one gives on top (resources.default, then a role's)."""
        return dataclasses.replace(base, **self.to_dict())


RESOURCE_KEYS = tuple(f.name for f in declared(Resources))


def parse_resources(raw: Any, where: str = "resources") -> dict[str, Resources]:
    resources = expect_dict(raw, where)
    check_keys(resources, ("default",) + ROLES, where)
    out = {}
    for role, value in resources.items():
        at = f"{where}.{role}"
        res = parse_section(Resources, value, at)
        if res.devices is not None:
            if role == "default":
                raise fail(f"{at}.devices", "names each task's GPUs: give it per role "
                                             "(resources.worker.devices)")
            if res.gpus is not None:
                raise fail(f"{at}.devices", "give gpus (a count) or devices (each "
                                             "task's GPUs), not both")
        out[role] = res
    return out


def check_devices(resources: dict[str, Resources], cluster: dict[str, list[Address]],
                  evaluator: Address | None) -> None:
    """resources.ROLE.devices has one entry per task of the role."""
    for role, res in resources.items():
        if res.devices is None:
            continue
        n = len(cluster.get(role, [])) if role != "evaluator" else int(evaluator is not None)
        if len(res.devices) != n:
            raise fail(f"resources.{role}.devices", f"has {len(res.devices)} entries for "
                                                     f"{n} {role} task{'s' if n != 1 else ''}"
                                                     ": give one per task")


def resources_for(resources: dict[str, Resources], role: str) -> Resources:
    """A spec's ``resources``: resources.default overlaid with resources.<role>."""
    base = resources.get("default", Resources())
    return resources[role].over(base) if role in resources else base
