"""Backends, one module each. A new engine is a new module and one line here."""

from __future__ import annotations

import importlib

from launcher.backends.base import Backend

_MODULES = {
    "local": "launcher.backends.local",
    "ssh": "launcher.backends.ssh",
    "slurm": "launcher.backends.slurm",
    "kubernetes": "launcher.backends.kubernetes",
    "docker": "launcher.backends.docker",
}


def backend_class(name: str) -> type[Backend]:
    """The Backend subclass for ``name`` (each module defines ``BACKEND``)."""
    module = importlib.import_module(_MODULES[name])
    return module.BACKEND
