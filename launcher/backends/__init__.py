"""The backend registry: one line per engine, naming its pieces (launcher/backends/engine.py):
the attached backend that runs the tasks for the job loop, the submitter ``--detach`` hands
the whole job to, the follower of its runs by handle. ``register`` adds one at run time (a
test-only backend, a plug-in)."""

from __future__ import annotations

import importlib
import pkgutil
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from launcher.backends.base import Backend
    from launcher.backends.engine import Follower, Submitter
    from launcher.records.lease import Holder


@dataclass(frozen=True)
class Engine:
    """One engine's pieces, each a class or where it is, imported only when asked for:
    ``"module"`` (its ``BACKEND``) or ``"module:Name"``. No submitter: a detached run keeps
    its launcher, as a daemon; no follower: only the launcher knows its runs."""

    attached: str | type[Backend]
    submitter: str | type[Submitter] | None = None
    follower: str | type[Follower] | None = None


_REGISTRY: dict[str, Engine] = {
    "local": Engine("launcher.backends.local"),
    "ssh": Engine("launcher.backends.ssh"),
    "slurm": Engine("launcher.backends.slurm", "launcher.backends.slurm_submit:SlurmSubmitter",
                    "launcher.backends.slurm_follow:SlurmFollower"),
    "kubernetes": Engine("launcher.backends.kubernetes",
                         "launcher.backends.kubernetes_submit:KubernetesSubmitter",
                         "launcher.backends.kubernetes_follow:KubernetesFollower"),
    "docker": Engine("launcher.backends.docker"),
}


def register(name: str, backend: str | type[Backend], *,
             submitter: str | type[Submitter] | None = None,
             follower: str | type[Follower] | None = None) -> None:
    """Make ``backend`` (a class, or where it is) available as ``"backend": name`` in
    specs, with its submitter and follower where the engine has them."""
    _REGISTRY[name] = Engine(backend, submitter, follower)


def unregister(name: str) -> None:
    _REGISTRY.pop(name, None)


def names() -> tuple[str, ...]:
    return tuple(_REGISTRY)


def engine_modules() -> dict[str, tuple[str, ...]]:
    """Each engine registered by module name (the built-in ones), name -> every module of
    it: its pieces' modules (the attached backend's first), then the modules of
    launcher/backends/ named ``<engine>_*`` found on disk (its helpers: slurm_allocation,
    ssh_copy...). The house rules (tests/launcher/test_house_rules.py) read it."""
    here = sorted(m.name for m in pkgutil.iter_modules(__path__))
    out = {}
    for name, engine in _REGISTRY.items():
        if isinstance(engine.attached, str):
            pieces = [_where(p)[0] for p in (engine.attached, engine.submitter, engine.follower)
                      if isinstance(p, str)]
            helpers = [f"{__name__}.{m}" for m in here if m.startswith(f"{name}_")]
            out[name] = tuple(dict.fromkeys(pieces + helpers))
    return out


def _where(entry: str) -> tuple[str, str]:
    module, _, attr = entry.partition(":")
    return module, attr or "BACKEND"


def _load(entry: str | type) -> Any:
    if not isinstance(entry, str):
        return entry
    module, attr = _where(entry)
    return getattr(importlib.import_module(module), attr)


def backend_class(name: str) -> type[Backend]:
    """The attached Backend subclass for ``name``."""
    cls: type[Backend] = _load(_REGISTRY[name].attached)
    return cls


def submitter(backend: Backend) -> Submitter | None:
    """What ``--detach`` hands the job to, built from the attached ``backend`` (which
    accepted the job); None where its engine takes no whole job with these options."""
    engine = _REGISTRY.get(backend.name)
    if engine is None or engine.submitter is None:
        return None
    cls: type[Submitter] = _load(engine.submitter)
    return cls(backend) if cls.takes(backend.options) else None


def following(name: str | None) -> type[Follower]:
    """What follows a run whose state.json names backend ``name`` (``launch status``,
    ``launch cancel``): its engine's follower, else the Follower of a run no engine holds
    (a name not registered here too: its engine, if any, cannot be asked)."""
    from launcher.backends.engine import Follower

    engine = _REGISTRY.get(name or "")
    if engine is None or engine.follower is None:
        return Follower
    cls: type[Follower] = _load(engine.follower)
    return cls


def engine_holds(holder: Holder) -> bool:
    """The engine of the run that holds a lease still has it (a requeued batch job waiting
    in its queue): the lease is not taken from it, whatever its launcher and heartbeat."""
    return following(holder.backend).holds(holder.handle)
