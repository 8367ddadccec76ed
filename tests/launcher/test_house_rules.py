"""The house's rules, checked on the code itself: orchestrator/ never imports launcher/,
importing a backend never imports the job loop, the launcher's start-up never imports
TensorFlow, a backend never sees the spec, and a new engine is one registry line."""

from __future__ import annotations

import ast
import json
import subprocess
import sys
from pathlib import Path

import pytest
from support import REPO

pytestmark = pytest.mark.usefixtures("scripted_backend")


BACKENDS = ["launcher.backends.local", "launcher.backends.ssh", "launcher.backends.slurm",
            "launcher.backends.kubernetes"]


def imported_modules(path: Path) -> set[str]:
    tree = ast.parse(path.read_text())
    out = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            out.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            out.add(node.module)
    return out


@pytest.mark.parametrize("path", sorted((REPO / "orchestrator").glob("*.py")),
                         ids=lambda p: p.name)
def test_orchestrator_never_imports_launcher(path):
    assert not {m for m in imported_modules(path) if m.split(".")[0] == "launcher"}


@pytest.mark.parametrize("path", sorted((REPO / "launcher" / "backends").glob("*.py")),
                         ids=lambda p: p.name)
def test_backends_take_the_plan_never_the_spec(path):
    """A backend gets its options, the job's Reservation and the plan: no module of
    launcher/backends/ names ``Spec``, takes a ``spec`` argument or reads a ``.spec``."""
    tree = ast.parse(path.read_text())
    names = {n.id for n in ast.walk(tree) if isinstance(n, ast.Name)}
    names |= {a.asname or a.name for n in ast.walk(tree) if isinstance(n, ast.ImportFrom)
              for a in n.names}
    arguments = {a.arg for a in ast.walk(tree) if isinstance(a, ast.arg)}
    attributes = {n.attr for n in ast.walk(tree) if isinstance(n, ast.Attribute)}
    assert "Spec" not in names and "spec" not in arguments and "spec" not in attributes


def modules_after_import(*names: str) -> set[str]:
    code = (f"import json, sys\nfor n in {list(names)!r}: __import__(n)\n"
            "print(json.dumps(sorted(sys.modules)))")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          cwd=REPO, check=True)
    return set(json.loads(done.stdout))


@pytest.mark.parametrize("backend", BACKENDS)
def test_importing_a_backend_does_not_import_the_job_loop(backend):
    loaded = modules_after_import(backend)
    assert not loaded & {"launcher.job", "launcher.monitors.coordinator", "launcher.cli"}
    assert "tensorflow" not in loaded


def test_the_cli_start_up_imports_neither_tensorflow_nor_fsspec():
    loaded = modules_after_import("launcher.cli")
    assert "tensorflow" not in loaded and "fsspec" not in loaded


def test_a_backend_registered_in_one_line_runs_a_job_through_the_real_job_loop(tmp_path):
    from scripted_backend import Script, ScriptedBackend, run_job

    from launcher.backends import backend_class, names

    assert "scripted" in names() and backend_class("scripted") is ScriptedBackend
    backend = ScriptedBackend({"chief:0": [Script(exit_at=1)]})
    result, _ = run_job({"cluster": {"chief": 1}}, backend, tmp_path)
    assert result.status == 0 and [n for _, n in backend.starts] == ["chief:0"]
