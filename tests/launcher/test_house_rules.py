"""The house's rules, checked on the code itself: the rooms of launcher/ and orchestrator/
and what each may import (``ROOMS``, the table docs/architecture.md shows, generated from
it: ``python tests/launcher/test_house_rules.py``), no circle in the import graph (imports
inside functions and under TYPE_CHECKING count), no import back up the floors, engine
modules imported only inside launcher/backends/, orchestrator/ never imports launcher/,
importing a backend never imports the job loop, the launcher's start-up never imports
TensorFlow, a backend never sees the spec, a new engine is one registry line, and the unit
tests mirror the code (every folder of tests under tests/launcher and tests/orchestrator is
named like a package; docs/architecture.md shows them, generated here too)."""

from __future__ import annotations

import ast
import json
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
PACKAGES = ("launcher", "orchestrator")
ENGINES = ("local", "ssh", "slurm", "kubernetes", "docker")
DOC = REPO / "docs" / "architecture.md"
BEGIN = "<!-- rooms: generated from ROOMS in tests/launcher/test_house_rules.py -->"
END = "<!-- /rooms -->"
TESTS = REPO / "tests"
LAYOUT_BEGIN = "<!-- test layout: generated from tests/launcher and tests/orchestrator -->"
LAYOUT_END = "<!-- /test layout -->"

# The rooms, from the ground floor up: a module belongs to the longest room that names it
# or its package. Each room may import the rooms listed (always below it: no arrow runs
# back up), and nothing else of the project.
ROOMS: dict[str, tuple[str, tuple[str, ...]]] = {
    "orchestrator.roles": (
        "job names, trainers, start order, the primary task",
        ()),
    "orchestrator.decisions": (
        "the decision vocabulary (finish, fail, lost, restart, drop, ignore) and `TaskState`, the"
        " one task snapshot",
        ()),
    "orchestrator.policies": (
        "`RestartPolicy` and the default per role, restart scope, back-off",
        ("orchestrator.decisions", "orchestrator.roles")),
    "orchestrator.tfformats": (
        "TF's file formats: protobuf wire, TFRecord, events, index headers",
        ()),
    "orchestrator": (
        "reading model_dir (checkpoints, coordinator, metrics file, evaluations), the "
        "workers an elastic job lost and their hosts' return, and what runs inside the "
        "user's script (sharding, epochs, evaluation, steps, at_max_steps; TensorFlow inside "
        "functions only)",
        ("orchestrator.decisions", "orchestrator.roles", "orchestrator.tfformats")),
    "launcher.errors": (
        "`UsageError`, `SpecError`, `PreflightError`: one line, exit 2",
        ()),
    "launcher.events": (
        "the run's event log (events.jsonl)",
        ()),
    "launcher.signals": (
        "which signals stop a run",
        ()),
    "launcher.redact": (
        "secrets masked in environments",
        ()),
    "launcher.expand": (
        "`$(VAR)` in a task's arguments",
        ()),
    "launcher.crash": (
        "the launcher's own failure: one line, its traceback saved (run_dir/launcher-"
        "error.txt)",
        ()),
    "launcher.unwritten": (
        "what the run directory could not take (a full disk, removed): said once, counted, "
        "in the closing lines",
        ()),
    "launcher.backends.remote_bootstrap": (
        "what runs on a remote host before a task (stdlib only: it is sent there)",
        ()),
    "launcher.backends.watchdog": (
        "the watchdog process that ends a dead launcher's tasks",
        ()),
    "launcher.checks": (
        "plain value checks (`expect_*`, `check_keys`) and `Address`",
        ("launcher.errors",)),
    "launcher.spec": (
        "the spec as plain data, its validation (handed the backends' names)",
        ("launcher.checks", "launcher.errors", "orchestrator.policies", "orchestrator.roles")),
    "launcher.model_dir": (
        "the launcher's one way into model_dir: URL, storage options, readers",
        ("orchestrator",)),
    "launcher.restarts": (
        "the one judge of an exit or a loss",
        ("orchestrator.decisions", "orchestrator.policies", "orchestrator.roles")),
    "launcher.plan": (
        "`TaskPlan`, `JobPlan`, `build_plan`, `Reservation`",
        ("launcher.checks", "launcher.expand", "launcher.model_dir", "launcher.spec",
         "orchestrator", "orchestrator.policies", "orchestrator.roles")),
    "launcher.gpus": (
        "a host's GPUs (nvidia-smi's query), every task's devices (a pure assignment), "
        "over-asks refused; docker's `--gpus`",
        ("launcher.errors", "launcher.plan", "orchestrator.roles")),
    "launcher.ending": (
        "how a job ends once training is done, a pure function; `JobResult`",
        ("orchestrator.decisions", "orchestrator.roles")),
    "launcher.output": (
        "console, live view, progress line, closing lines, summary and task rows, metrics "
        "table, report",
        ("launcher.ending", "launcher.gpus", "launcher.model_dir", "orchestrator",
         "orchestrator.decisions", "orchestrator.roles")),
    "launcher.backends.options": (
        "backend options declared as data",
        ("launcher.checks", "launcher.errors")),
    "launcher.backends.base": (
        "the `Backend` interface: start a task, follow a run",
        ("launcher.backends.options", "launcher.checks", "launcher.errors", "launcher.gpus",
         "launcher.plan")),
    "launcher.backends.processes": (
        "process groups, free ports, the parent-death signal",
        ("launcher.backends.base", "launcher.backends.remote_bootstrap",
         "launcher.backends.watchdog", "launcher.plan")),
    "launcher.preflight": (
        "checks before anything starts: mistakes outside the spec (`environment`), shared "
        "storage (`storage_check`)",
        ("launcher.backends.base", "launcher.backends.remote_bootstrap", "launcher.errors",
         "launcher.events", "launcher.output", "launcher.plan")),
    "launcher.backends": (
        "the registry (one line per engine) and one module per engine: local, ssh, slurm, "
        "kubernetes, docker",
        ("launcher.backends.base", "launcher.backends.options", "launcher.backends.processes",
         "launcher.backends.remote_bootstrap", "launcher.backends.watchdog", "launcher.checks",
         "launcher.errors", "launcher.gpus", "launcher.model_dir", "launcher.plan",
         "launcher.preflight", "launcher.redact", "launcher.spec", "orchestrator.policies")),
    "launcher.tracebacks": (
        "the exception in a failed task's log, however long what follows it; the user's "
        "innermost frame; the tail box",
        ("launcher.output",)),
    "launcher.monitors": (
        "what the job loop ticks (`Monitor`, `Watch`): the coordinator's adapter over "
        "model_dir, the TF servers asked over gRPC (`lost`, ps readiness), `timeouts.job`",
        ("launcher.ending", "launcher.events", "launcher.output", "orchestrator",
         "orchestrator.decisions", "orchestrator.roles")),
    "launcher.tasks": (
        "task mechanics: start, output, exits, stop; `TaskRun` and its snapshot",
        ("launcher.backends.base", "launcher.ending", "launcher.events", "launcher.output",
         "launcher.plan", "launcher.tracebacks", "launcher.unwritten", "orchestrator.decisions",
         "orchestrator.roles")),
    "launcher.job": (
        "the job loop's policy: start order, ends, restarts, teardown",
        ("launcher.backends.base", "launcher.crash", "launcher.ending", "launcher.errors",
         "launcher.events", "launcher.monitors", "launcher.output", "launcher.plan",
         "launcher.restarts", "launcher.signals", "launcher.tasks", "launcher.tracebacks",
         "launcher.unwritten", "orchestrator", "orchestrator.decisions", "orchestrator.roles")),
    "launcher.runs.registry": (
        "the run registry: state.json per run, from snapshots",
        ("launcher.errors", "launcher.events", "launcher.output", "orchestrator.decisions")),
    "launcher.lease": (
        "one live run per model_dir: the lease file, its heartbeat, who may take it "
        "(docs/runs.md)",
        ("launcher.backends", "launcher.errors", "launcher.runs.registry")),
    "launcher.tensorboard": (
        "TensorBoard with the run (a process the launcher owns, beside the chief or on this "
        "machine, outside the verdict) and `launch tensorboard RUN`",
        ("launcher.backends", "launcher.backends.processes", "launcher.plan",
         "launcher.preflight", "launcher.runs.registry")),
    "launcher.api": (
        "the composition root: `launcher.run()`, `dry_run()`; builds the backend, the plan,"
        " the monitors, the job loop",
        ("launcher.backends", "launcher.backends.base", "launcher.crash", "launcher.ending",
         "launcher.errors", "launcher.gpus", "launcher.job", "launcher.lease", "launcher.model_dir",
         "launcher.monitors", "launcher.output", "launcher.plan", "launcher.preflight",
         "launcher.redact", "launcher.runs.registry", "launcher.spec", "launcher.tensorboard",
         "launcher.unwritten", "orchestrator", "orchestrator.roles")),
    "launcher.runs": (
        "`launch list/status/logs/cancel` (through the backend a run names) and `--detach`",
        ("launcher.api", "launcher.backends", "launcher.backends.base", "launcher.errors",
         "launcher.lease", "launcher.output", "launcher.plan", "launcher.runs.registry",
         "launcher.spec")),
    "launcher.output.report": (
        "`launch report`: a run's loss and metrics drawn (HTML, PNG)",
        ("launcher.errors", "launcher.output", "launcher.preflight", "launcher.runs.registry",
         "orchestrator", "orchestrator.tfformats")),
    "launcher.cli": (
        "`launch`: a thin layer over the API and the run commands",
        ("launcher.api", "launcher.backends.remote_bootstrap", "launcher.crash",
         "launcher.errors", "launcher.output", "launcher.runs", "launcher.signals")),
    "launcher": (
        "the package: `launcher.run`, `launcher.dry_run`",
        ("launcher.api",)),
}

def module_files() -> dict[str, Path]:
    out = {}
    for package in PACKAGES:
        for path in (REPO / package).rglob("*.py"):
            parts = list(path.relative_to(REPO).with_suffix("").parts)
            out[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    return out


def import_graph() -> dict[str, set[str]]:
    """Module -> the project's modules it imports: at the top, inside functions and under
    TYPE_CHECKING alike (a package's own __init__ is no arrow)."""
    files = module_files()

    def known(name: str) -> str | None:
        while name and name not in files:
            name = name.rpartition(".")[0]
        return name or None

    graph = {}
    for module, path in files.items():
        targets = set()
        for node in ast.walk(ast.parse(path.read_text())):
            names: list[str] = []
            if isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
                names = [f"{node.module}.{a.name}" for a in node.names]
            for name in names:
                found = known(name)
                if found and found != module and not module.startswith(f"{found}."):
                    targets.add(found)
        graph[module] = targets
    return graph


def room_of(module: str) -> str | None:
    rooms = [r for r in ROOMS if module == r or module.startswith(f"{r}.")]
    return max(rooms, key=len) if rooms else None


def circles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected groups of more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    found = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        for w in sorted(graph[v]):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            group = []
            while True:
                w = stack.pop()
                group.append(w)
                if w == v:
                    break
            if len(group) > 1:
                found.append(sorted(group))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return found


def room_arrows(graph: dict[str, set[str]]) -> set[tuple[str, str, str, str]]:
    """(from room, to room, module, imported module) of every import between two rooms."""
    return {(room_of(m), room_of(t), m, t) for m, ts in graph.items() for t in ts
            if room_of(m) != room_of(t)}


def rooms_table() -> str:
    """The rooms as docs/architecture.md shows them, from the ground floor up."""
    def where(room: str) -> str:
        path = room.replace(".", "/")
        return f"`{path}/`" if (REPO / path).is_dir() else f"`{path}.py`"

    lines = ["| room | holds | may import |", "|---|---|---|"]
    for room, (holds, may) in ROOMS.items():
        lines.append(f"| {where(room)} | {holds} | {', '.join(may) or 'nothing'} |")
    return "\n".join(lines)


def unit_test_folders() -> list[Path]:
    """The folders of test modules under tests/launcher and tests/orchestrator (folders of
    data only, such as tests/orchestrator/real_checkpoints/, left out)."""
    return sorted(d for package in PACKAGES
                  for d in [TESTS / package, *(TESTS / package).rglob("*")]
                  if d.is_dir() and any(d.glob("test_*.py")))


def layout_table() -> str:
    """The unit-test folders as docs/architecture.md shows them: each beside its package."""
    lines = ["| unit tests | of the package |", "|---|---|"]
    for folder in unit_test_folders():
        lines.append(f"| `{folder.relative_to(REPO)}/` | `{folder.relative_to(TESTS)}/` |")
    return "\n".join(lines)


def generated(text: str, begin: str, end: str) -> str:
    assert begin in text and end in text, f"{DOC} lacks the markers {begin} {end}"
    return text.split(begin, 1)[1].split(end, 1)[0].strip()


def test_every_module_has_a_room():
    assert [m for m in module_files() if room_of(m) is None] == []


def test_the_import_graph_has_no_circle():
    """Lazy imports (inside functions) and TYPE_CHECKING imports included."""
    assert circles(import_graph()) == []


def test_each_room_imports_only_what_the_table_allows():
    wrong = sorted(f"{m} imports {t} ({a} may not import {b})"
                   for a, b, m, t in room_arrows(import_graph()) if b not in ROOMS[a][1])
    assert wrong == []


def test_no_import_runs_back_up_the_floors():
    order = list(ROOMS)
    assert [f"{a} -> {b}" for a, (_, may) in ROOMS.items() for b in may
            if order.index(b) > order.index(a)] == []


def test_engine_modules_are_imported_only_inside_launcher_backends():
    engines = {f"launcher.backends.{e}" for e in ENGINES}
    assert sorted(f"{m} imports {t}" for m, ts in import_graph().items() for t in ts
                  if t in engines and not m.startswith("launcher.backends")) == []


def test_docs_architecture_shows_the_rooms_table():
    assert generated(DOC.read_text(), BEGIN, END) == rooms_table(), \
        "docs/architecture.md is out of date: python tests/launcher/test_house_rules.py"


def test_unit_tests_mirror_the_code():
    """Every folder of tests under tests/launcher and tests/orchestrator is named like a
    package of the code and holds that package's unit tests (tests/launcher/monitors/:
    launcher/monitors/), so a module's fast tests are found where the module is."""
    assert {"tests/launcher", "tests/orchestrator"} <= \
        {str(f.relative_to(REPO)) for f in unit_test_folders()}
    assert [f"{f.relative_to(REPO)}/ names no package of the code"
            for f in unit_test_folders()
            if not (REPO / f.relative_to(TESTS) / "__init__.py").is_file()] == []


def test_docs_architecture_shows_the_test_layout():
    assert generated(DOC.read_text(), LAYOUT_BEGIN, LAYOUT_END) == layout_table(), \
        "docs/architecture.md is out of date: python tests/launcher/test_house_rules.py"

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


def write_doc() -> None:
    """Write the rooms table and the test layout into docs/architecture.md, each between
    its markers."""
    text = DOC.read_text()
    for begin, end, body in ((BEGIN, END, rooms_table()),
                             (LAYOUT_BEGIN, LAYOUT_END, layout_table())):
        head, rest = text.split(begin, 1)
        text = f"{head}{begin}\n{body}\n{end}{rest.split(end, 1)[1]}"
    DOC.write_text(text)


if __name__ == "__main__":
    write_doc()
