"""The job loop stays lean (issue 38): the ``Job`` class at most 400 lines, 28 methods and
10 parameters to build; ``end_step`` at most 5 parameters (the job's moments in one
``Moments`` record). Measured on the code, as a reader sees it."""

from __future__ import annotations

import ast
from pathlib import Path

LAUNCHER = Path(__file__).resolve().parents[2] / "launcher"


def function(path: Path, name: str, within: str | None = None) -> ast.AST:
    tree = ast.parse(path.read_text())
    scope = tree.body if within is None else next(
        n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == within).body
    return next(n for n in scope if isinstance(n, (ast.FunctionDef, ast.ClassDef))
                and n.name == name)


def parameters(node: ast.AST) -> int:
    assert isinstance(node, ast.FunctionDef)
    args = node.args
    named = [a.arg for a in args.posonlyargs + args.args + args.kwonlyargs]
    return len([a for a in named if a != "self"])


def test_the_job_class_is_at_most_400_lines_28_methods_and_10_parameters():
    job = function(LAUNCHER / "job.py", "Job")
    assert isinstance(job, ast.ClassDef) and job.end_lineno is not None
    methods = [n for n in job.body if isinstance(n, ast.FunctionDef)]
    assert job.end_lineno - job.lineno + 1 <= 400
    assert len(methods) <= 28, [m.name for m in methods]
    assert parameters(function(LAUNCHER / "job.py", "__init__", within="Job")) <= 10


def test_end_step_takes_the_jobs_moments_in_one_record():
    node = function(LAUNCHER / "ending.py", "end_step")
    assert parameters(node) <= 5
    assert isinstance(node, ast.FunctionDef)
    assert "moments" in [a.arg for a in node.args.args]
