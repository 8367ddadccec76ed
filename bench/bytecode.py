"""Bytecode for the launchers a bench runs, as a user's installed launcher has it.

Where the environment sets PYTHONDONTWRITEBYTECODE (some CI runners and shells do), every
`launch` would compile each module it imports again: ~150 ms and a third of a small job's
CPU, which no user's installed launcher pays. ``with_bytecode`` compiles the trees once and
lets the bench's children read (and write) bytecode again, as scripts/test.sh does."""

from __future__ import annotations

import compileall
import os
from pathlib import Path


def with_bytecode(*trees: Path) -> None:
    """Compile each tree's launcher and orchestrator; unset PYTHONDONTWRITEBYTECODE."""
    os.environ.pop("PYTHONDONTWRITEBYTECODE", None)
    for tree in trees:
        for package in ("launcher", "orchestrator"):
            compileall.compile_dir(str(tree / package), quiet=1, workers=0)
