"""The house's figures (issue 38's "What must be shown"), measured on the tree this script
is in with ``ast`` and line counts: what each refactor step is judged by. A figure whose
code is gone prints "absent"; nothing here imports TensorFlow or starts a process.

    PYTHONPATH=$PWD .venv/bin/python bench/house_figures.py [TREE]

TREE (default: this checkout) may be any checkout, e.g. a ``git worktree add /tmp/base
REV`` of an earlier revision; the house rules' import circles and room loops are read with
that tree's own tests/launcher/test_house_rules.py (run it with PYTHONPATH=TREE).
"""

from __future__ import annotations

import ast
import importlib.util
import re
import sys
from collections.abc import Iterator
from pathlib import Path

ABSENT = "absent"
# the exceptions an exit map turns into a status: one that names 3 of them and an exit code
# of its own (130 for Ctrl-C, 128+N for a signal) is counted as a map
EXIT_NAMES = {"UsageError", "KeyboardInterrupt", "Terminated", "LauncherFailed"}
# the remote agent's program: a module that takes names from one (its words, its checks)
# carries the whole program along; sending it (``import remote_bootstrap``, or taking the
# stub that reads it on the far side: ``SSH_STUB``, ``NODE_STUB``) is no such use
REMOTE_PROGRAMS = ("launcher.backends.remote_bootstrap", "launcher.backends.slurm_node",
                   "launcher.backends.agent.entry")
TIMEOUT_READ = re.compile(r"timeouts\[|timeouts\.get\(")   # a timeout read by string key


def lines(path: Path) -> int:
    return len(path.read_text(encoding="utf-8").splitlines())


def python_files(root: Path, *folders: str) -> Iterator[Path]:
    for folder in folders:
        yield from sorted((root / folder).rglob("*.py"))


def module_name(root: Path, path: Path) -> str:
    parts = path.relative_to(root).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def trees(root: Path, *folders: str) -> Iterator[tuple[Path, ast.Module]]:
    for path in python_files(root, *folders):
        yield path, ast.parse(path.read_text(encoding="utf-8"))


def names_from(root: Path, path: Path, tree: ast.Module) -> set[str]:
    """The modules ``path`` takes names from (``from M import name``, at any depth,
    relative ones resolved)."""
    package = module_name(root, path).split(".")
    if path.name != "__init__.py":
        package = package[:-1]
    out: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and not all(
                alias.name.endswith("_STUB") or alias.name == "STUB" for alias in node.names):
            base = ".".join(package[:len(package) - node.level + 1]) if node.level else ""
            out.add(".".join(p for p in (base, node.module or "") if p))
    return out


def methods(cls: ast.ClassDef) -> list[ast.FunctionDef | ast.AsyncFunctionDef]:
    return [n for n in cls.body if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))]


def span(node: ast.AST) -> int:
    return node.end_lineno - node.lineno + 1  # type: ignore[attr-defined]


def params(fn: ast.FunctionDef | ast.AsyncFunctionDef) -> int:
    """Parameters a caller may pass (``self``/``cls`` left out)."""
    a = fn.args
    named = [*a.posonlyargs, *a.args, *a.kwonlyargs]
    if named and named[0].arg in ("self", "cls"):
        named = named[1:]
    return len(named) + (a.vararg is not None) + (a.kwarg is not None)


def classes(root: Path, name: str | None = None, *folders: str
            ) -> list[tuple[Path, ast.ClassDef]]:
    return [(p, n) for p, t in trees(root, *folders) for n in ast.walk(t)
            if isinstance(n, ast.ClassDef) and (name is None or n.name == name)]


def functions(root: Path, name: str, *folders: str
              ) -> list[tuple[Path, ast.FunctionDef | ast.AsyncFunctionDef]]:
    return [(p, n) for p, t in trees(root, *folders) for n in ast.walk(t)
            if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef)) and n.name == name]


def is_exit_map(fn: ast.AST) -> bool:
    names = {n.id for n in ast.walk(fn) if isinstance(n, ast.Name)}
    codes = any(isinstance(n, ast.Constant) and n.value in (128, 130) for n in ast.walk(fn))
    return len(names & EXIT_NAMES) >= 3 and codes


def backends_figures(root: Path) -> list[tuple[str, str]]:
    biggest = max(python_files(root, "launcher/backends"), key=lines, default=None)
    ssh = root / "launcher/backends/ssh.py"
    biggest_class = max(classes(root, None, "launcher/backends"), key=lambda pc: span(pc[1]),
                        default=None)
    news = [f for _, t in trees(root, "launcher/backends") for f in ast.walk(t)
            if isinstance(f, ast.FunctionDef) and f.name == "__new__"]
    words = sorted(module_name(root, p) for p, t in trees(root, "launcher", "orchestrator")
                   if module_name(root, p) not in REMOTE_PROGRAMS
                   and not module_name(root, p).startswith("launcher.backends.agent")
                   and names_from(root, p, t) & set(REMOTE_PROGRAMS))
    if biggest_class is None:
        cls_text = ABSENT
    else:
        cls_path, cls = biggest_class
        cls_text = (f"{cls.name}: {span(cls)} lines / {len(methods(cls))} methods "
                    f"({cls_path.relative_to(root)})")
    return [
        ("biggest file in launcher/backends/",
         f"{lines(biggest)} lines ({biggest.relative_to(root)})" if biggest else ABSENT),
        ("launcher/backends/ssh.py", f"{lines(ssh)} lines" if ssh.exists() else ABSENT),
        ("modules taking names (words) from the remote program",
         f"{len(words)}" + (f" ({', '.join(words)})" if words else "")),
        ("biggest class in launcher/backends/", cls_text),
        ("__new__ in launcher/backends/", str(len(news))),
    ]


def spec_figures(root: Path) -> list[tuple[str, str]]:
    reads = sum(len(TIMEOUT_READ.findall(p.read_text(encoding="utf-8")))
                for p in python_files(root, "launcher", "orchestrator"))
    spec = root / "launcher/spec.py"
    if not spec.exists():
        package = list(python_files(root, "launcher/spec"))
        spec = max(package, key=lines) if package else spec
    return [("string-key timeout reads (grep timeouts[ / timeouts.get( in launcher, "
             "orchestrator)", str(reads)),
            ("launcher/spec.py (or the spec package's biggest module)",
             f"{lines(spec)} lines ({spec.relative_to(root)})" if spec.exists() else ABSENT)]


def job_figures(root: Path) -> list[tuple[str, str]]:
    jobs = classes(root, "Job", "launcher")
    if not jobs:
        job = ABSENT
    else:
        path, cls = jobs[0]
        init = next((m for m in methods(cls) if m.name == "__init__"), None)
        job = (f"{span(cls)} lines / {len(methods(cls))} methods / __init__ "
               f"{params(init) if init else 0} params ({path.relative_to(root)}, "
               f"{lines(path)} lines)")
    ends = functions(root, "end_step", "launcher")
    return [("Job class", job),
            ("end_step parameters", ", ".join(str(params(f)) for _, f in ends) or ABSENT)]


def api_figures(root: Path) -> list[tuple[str, str]]:
    api = root / "launcher/api.py"
    if not api.exists():
        return [("launcher/api.py", ABSENT)]
    tree = ast.parse(api.read_text(encoding="utf-8"))
    probes = sum(isinstance(n, ast.Call) and isinstance(n.func, ast.Name)
                 and n.func.id == "getattr" for n in ast.walk(tree))
    local = len({id(n) for f in ast.walk(tree)
                 if isinstance(f, (ast.FunctionDef, ast.AsyncFunctionDef))
                 for n in ast.walk(f) if isinstance(n, (ast.Import, ast.ImportFrom))})
    maps = sorted(f"{module_name(root, p)}.{f.name}" for p, t in trees(root, "launcher")
                  for f in ast.walk(t)
                  if isinstance(f, (ast.FunctionDef, ast.AsyncFunctionDef)) and is_exit_map(f))
    return [("launcher/api.py", f"{lines(api)} lines"),
            ("getattr calls in api.py", str(probes)),
            ("function-local imports in api.py", str(local)),
            ("exception-to-exit-status maps", f"{len(maps)} ({', '.join(maps)})")]


def house_rules(root: Path) -> list[tuple[str, str]]:
    top = len(list((root / "launcher").glob("*.py")))
    try:
        from radon.complexity import cc_visit

        worst = max(((b.complexity, f"{p.relative_to(root)}:{b.lineno} {b.name}")
                     for p in python_files(root, "launcher", "orchestrator")
                     for b in cc_visit(p.read_text(encoding="utf-8"))), default=None)
        complexity = f"{worst[0]} ({worst[1]})" if worst else ABSENT
    except ImportError:
        complexity = "radon not installed"
    out = [("modules at launcher/'s top (__init__.py included)", str(top)),
           ("highest complexity (radon)", complexity)]
    rules = root / "tests/launcher/test_house_rules.py"
    try:
        sys.path[:0] = [str(root), str(root / "tests")]
        spec = importlib.util.spec_from_file_location("house_rules", rules)
        assert spec is not None and spec.loader is not None
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        graph = module.import_graph()
        out += [("import circles", str(len(module.circles(graph)))),
                ("loops between rooms", str(len(module.loops_named(graph))))]
    except Exception as e:  # noqa: BLE001 - an older tree's rules may differ: say so
        out.append(("import circles, loops between rooms", f"{ABSENT} ({type(e).__name__})"))
    return out


def figures(root: Path) -> list[tuple[str, str]]:
    return [*backends_figures(root), *spec_figures(root), *job_figures(root),
            *api_figures(root), *house_rules(root)]


def main(argv: list[str]) -> int:
    root = Path(argv[0] if argv else Path(__file__).resolve().parent.parent).resolve()
    rows = figures(root)
    width = max(len(k) for k, _ in rows)
    for key, value in rows:
        print(f"{key:<{width}}  {value}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
