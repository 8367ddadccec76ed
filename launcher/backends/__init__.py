"""The backend registry: one module each, one line here. ``register`` adds one at run time
(a test-only backend, a plug-in)."""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from launcher.backends.base import Backend
    from launcher.backends.engine import Follower
    from launcher.records.lease import Holder

# name -> the module that defines ``BACKEND`` (imported only when the backend is used)
_REGISTRY: dict[str, str | type[Backend]] = {
    "local": "launcher.backends.local",
    "ssh": "launcher.backends.ssh",
    "slurm": "launcher.backends.slurm",
    "kubernetes": "launcher.backends.kubernetes",
    "docker": "launcher.backends.docker",
}


def register(name: str, backend: str | type[Backend]) -> None:
    """Make ``backend`` (a class, or the name of a module defining ``BACKEND``) available
    as ``"backend": name`` in specs."""
    _REGISTRY[name] = backend


def unregister(name: str) -> None:
    _REGISTRY.pop(name, None)


def names() -> tuple[str, ...]:
    return tuple(_REGISTRY)


def engine_modules() -> dict[str, str]:
    """Each engine registered by module name (the built-in ones), name -> module."""
    return {name: entry for name, entry in _REGISTRY.items() if isinstance(entry, str)}


def backend_class(name: str) -> type[Backend]:
    """The Backend subclass for ``name``."""
    entry = _REGISTRY[name]
    if isinstance(entry, str):
        entry = importlib.import_module(entry).BACKEND
    return entry


def following(name: str | None) -> type[Follower]:
    """What follows a run whose state.json names backend ``name`` (``launch status``,
    ``launch cancel``): that backend's class where it is a Follower (an engine holds its
    runs), else the Follower of a run no engine holds (a name not registered here too: its
    engine, if any, cannot be asked)."""
    from launcher.backends.engine import Follower

    cls = backend_class(name) if name in _REGISTRY else None
    return cls if cls is not None and issubclass(cls, Follower) else Follower


def engine_holds(holder: Holder) -> bool:
    """The engine of the run that holds a lease still has it (a requeued batch job waiting
    in its queue): the lease is not taken from it, whatever its launcher and heartbeat."""
    return following(holder.backend).holds(holder.handle)
