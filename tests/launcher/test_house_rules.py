"""The house's rules, checked on the code itself, as a reader sees it: every folder of
launcher/ and orchestrator/ is one room, and so is every top-level module. ``ROOMS`` (the
table docs/architecture.md shows, generated from it: ``python
tests/launcher/test_house_rules.py``) lists the rooms from the ground floor up and what each
may import. Every import counts: at the top, inside functions, under TYPE_CHECKING, relative
ones and a module's imports of its own parent package. No circle between modules, no loop
between rooms (each names its edges), no import back up the floors; every module of an
engine (as the registry says them) imported only inside launcher/backends/ and by no other
engine; every module of launcher/backends/ an engine's, the agent's or a named shared
helper; orchestrator/ never imports launcher/, importing any module of a backend
never imports the job loop, the launcher's start-up never imports TensorFlow, a backend
never sees the spec, a new engine is one registry line, and the unit tests mirror the code
(every folder of tests under tests/launcher and tests/orchestrator is named like a package;
docs/architecture.md shows them, generated here too)."""

from __future__ import annotations

import ast
import json
import subprocess
import sys
from pathlib import Path

import pytest

from launcher.backends import engine_modules

REPO = Path(__file__).resolve().parents[2]
PACKAGES = ("launcher", "orchestrator")
# The engines of the registry (launcher/backends/__init__.py), read before any test
# registers one of its own, each with every module of it (its pieces and the
# ``<engine>_*`` modules beside them): a new engine is covered here without a line of this
# file.
ENGINE_MODULES = engine_modules()
ENGINES = tuple(ENGINE_MODULES)
EVERY_ENGINE_MODULE = {m: name for name, ms in ENGINE_MODULES.items() for m in ms}
# The modules of launcher/backends/ that are no engine's: shared by the engines (a new one
# is named here, on purpose); the agent (agent/) is shared too.
SHARED_HELPERS = ("base", "engine", "environment", "processes", "storage_check", "watchdog",
                  "workdir_sync")
MAX_COMPLEXITY = 20     # radon's cyclomatic complexity, per function or method
MAX_TOP_MODULES = 18          # launcher/'s top, __init__.py included
DOC = REPO / "docs" / "architecture.md"
BEGIN = "<!-- rooms: generated from ROOMS in tests/launcher/test_house_rules.py -->"
END = "<!-- /rooms -->"
TESTS = REPO / "tests"
LAYOUT_BEGIN = "<!-- test layout: generated from tests/launcher and tests/orchestrator -->"
LAYOUT_END = "<!-- /test layout -->"

_O = "orchestrator"
# The rooms, from the ground floor up: a folder (all its modules, its __init__ included) or
# a top-level module. Each room may import the rooms listed (always below it: no arrow
# runs back up), and nothing else of the project.
ROOMS: dict[str, tuple[str, tuple[str, ...]]] = {
    "orchestrator.roles": (
        "job names, trainers, start order, the primary task, a task's address", ()),
    "orchestrator.decisions": (
        "the decision vocabulary (`Action`, a `Literal` mypy checks: finish, fail, lost, "
        "restart, drop, ignore) and `TaskState`, the one task snapshot", ()),
    "orchestrator.policies": (
        "`RestartPolicy` and the default per role, restart scope, back-off",
        (f"{_O}.decisions", f"{_O}.roles")),
    "orchestrator.tfformats": (
        "TF's file formats: protobuf wire, TFRecord, events, index headers", ()),
    "orchestrator.preemption": (
        "a preemption notice inside a task (stdlib only; `preempt_site/sitecustomize` arms "
        "it): the chief's training session stops after its step and saves", ()),
    "orchestrator.preempt_site": (
        "the `sitecustomize` the launcher puts first on a task's PYTHONPATH: arms the notice "
        "(loads orchestrator/preemption.py by its path), then chains to the one it hides",
        ()),
    "orchestrator.steps": ("how many global steps make the job (max_steps or epochs)", ()),
    "orchestrator.sharding": ("which part of the data a task reads", ()),
    "orchestrator.elastic": (
        "the workers an elastic job lost, the shards no one reads now, their hosts' return",
        (f"{_O}.sharding",)),
    "orchestrator.epochs": (
        "epochs that mean epochs (each example read `epochs` times by the cluster)",
        (f"{_O}.roles", f"{_O}.sharding", f"{_O}.steps")),
    "orchestrator.local_fs": (
        "model_dir's filesystem: fsspec's, or a small stand-in for a plain local path", ()),
    "orchestrator.metrics_file": (
        "the metrics file in model_dir: one JSON line per evaluated checkpoint",
        (f"{_O}.local_fs",)),
    "orchestrator.binary_metrics": ("AUC, accuracy, log loss in plain Python", ()),
    "orchestrator.checkpoints": (
        "the newest complete checkpoint in a model_dir, through fsspec",
        (f"{_O}.local_fs", f"{_O}.tfformats")),
    "orchestrator.step_series": (
        "a chief's events file read as step series (a restore seen)", ()),
    "orchestrator.writes": (
        "whether model_dir is still being written (a save, an export) once training is done",
        (f"{_O}.metrics_file", f"{_O}.tfformats")),
    "orchestrator.evaluated": (
        "what the evaluator has evaluated, read without TensorFlow",
        (f"{_O}.checkpoints", f"{_O}.tfformats")),
    "orchestrator.evaluation": (
        "true metrics per checkpoint, for the evaluator task",
        (f"{_O}.binary_metrics", f"{_O}.checkpoints", f"{_O}.metrics_file")),
    "orchestrator.coordinator": (
        "where training stands, read from model_dir; the judge of training done",
        (f"{_O}.checkpoints", f"{_O}.decisions", f"{_O}.evaluated", f"{_O}.metrics_file",
         f"{_O}.roles", f"{_O}.step_series", f"{_O}.tfformats", f"{_O}.writes")),
    "orchestrator.at_max_steps": (
        "an unmodified Estimator script stopped at exactly max_steps (inside the task)", ()),
    "orchestrator.offline_eval": (
        "`launch evaluate`: an exported model scored on a data file",
        (f"{_O}.binary_metrics",)),
    "orchestrator": ("the package (never imports launcher/)", ()),
    "launcher.errors": (
        "`UsageError`, `SpecError`, `PreflightError`: one line, exit 2; `exit_of`: the one "
        "map from how the launcher ended to its exit status", ()),
    "launcher.signals": ("which signals stop a run", ()),
    "launcher.redact": ("secrets masked in environments", ()),
    "launcher.expand": ("`$(VAR)` in a task's arguments", ()),
    "launcher.checks": (
        "plain value checks (`expect_*`, `check_keys`) and `Address`", ("launcher.errors",)),
    "launcher.spec": (
        "the spec as plain data, each key declared once with its schema, default and "
        "description (`Spec`, `Timeouts`, `Resources`); its validation (handed the backends'"
        " names), the rules between keys written by hand",
        ("launcher.checks", "launcher.errors", f"{_O}.policies", f"{_O}.preemption",
         f"{_O}.roles")),
    "launcher.ending": (
        "how a job ends once training is done, or on a preemption notice (who saves, when "
        "the wait for the checkpoint is over): pure functions; `JobResult`",
        ("launcher.spec", f"{_O}.decisions", f"{_O}.preemption", f"{_O}.roles")),
    "launcher.restarts": (
        "the one judge of an exit or a loss",
        (f"{_O}.decisions", f"{_O}.policies", f"{_O}.roles")),
    "launcher.model_dir": (
        "the launcher's one way into model_dir: URL, storage options, readers",
        (f"{_O}.checkpoints", f"{_O}.metrics_file")),
    "launcher.plan": (
        "`TaskPlan`, `JobPlan`, `build_plan`, `Reservation`",
        ("launcher.checks", "launcher.expand", "launcher.model_dir", "launcher.spec",
         f"{_O}.policies", f"{_O}.preemption", f"{_O}.roles", f"{_O}.steps")),
    "launcher.gpus": (
        "a host's GPUs (nvidia-smi's query), every task's devices (a pure assignment), "
        "over-asks refused",
        ("launcher.errors", "launcher.plan", "launcher.spec", f"{_O}.roles")),
    "launcher.output": (
        "what a person sees: console, live view, progress line, closing lines, summary and "
        "task rows, metrics table, how a failed task is shown, the dry run",
        ("launcher.ending", "launcher.gpus", "launcher.model_dir", "launcher.plan",
         "launcher.signals", f"{_O}.checkpoints",
         f"{_O}.coordinator", f"{_O}.decisions", f"{_O}.evaluated", f"{_O}.metrics_file",
         f"{_O}.roles", f"{_O}.sharding")),
    "launcher.records": (
        "what a run leaves on disk: events, state.json per run (the registry), model_dir's "
        "lease, what the run directory could not take, the launcher's own failure, plan.json; "
        "`RunRecord`: an attached run's directory as it goes",
        ("launcher.errors", "launcher.output", "launcher.plan", "launcher.redact",
         "launcher.signals", f"{_O}.decisions")),
    "launcher.backends": (
        "the registry (one line per engine, naming its pieces: the attached backend, the "
        "submitter, the follower), the `Backend` interfaces, each engine's modules "
        "(`<engine>.py` and its `<engine>_*.py`: local, ssh, slurm, kubernetes, docker) and "
        "the helpers they share: processes, the agent "
        "(agent/: the one program sent to a host or a Slurm node, and its one reader), the "
        "watchdog, the environment and shared-storage checks",
        ("launcher.checks", "launcher.errors", "launcher.gpus", "launcher.model_dir",
         "launcher.output", "launcher.plan", "launcher.records", "launcher.redact",
         "launcher.spec", f"{_O}.policies", f"{_O}.roles")),
    "launcher.schema": (
        "the spec's JSON Schema (cluster_specs/schema.json) and docs/spec.md's field table, "
        "made from the declarations (the spec's, each backend's options)",
        ("launcher.backends", "launcher.spec")),
    "launcher.monitors": (
        "what the job loop ticks (`Monitor`, `Watch`) and its one way in to them "
        "(`Watching`): the coordinator's adapter over model_dir, the TF servers asked over "
        "gRPC (`lost`, ps readiness), `timeouts.job`",
        ("launcher.ending", "launcher.output", "launcher.records", "launcher.spec",
         f"{_O}.checkpoints",
         f"{_O}.coordinator", f"{_O}.decisions", f"{_O}.roles")),
    "launcher.tasks": (
        "task mechanics: start, output, exits, stop; `TaskRun` and its snapshot",
        ("launcher.backends", "launcher.ending", "launcher.output", "launcher.plan",
         "launcher.records", f"{_O}.decisions", f"{_O}.roles")),
    "launcher.loop": (
        "beside the job loop: the notices that make the savers save (a preemption, the save "
        "request at max_steps); the restart policies' verdicts carried out",
        ("launcher.backends", "launcher.ending", "launcher.errors", "launcher.monitors",
         "launcher.output", "launcher.plan", "launcher.records", "launcher.restarts",
         "launcher.tasks", f"{_O}.decisions", f"{_O}.elastic", f"{_O}.preemption",
         f"{_O}.roles")),
    "launcher.job": (
        "the job loop's policy: start, the turn, training done, the end, teardown",
        ("launcher.backends", "launcher.ending", "launcher.errors", "launcher.loop",
         "launcher.monitors", "launcher.output", "launcher.plan", "launcher.records",
         "launcher.signals", "launcher.tasks", f"{_O}.decisions", f"{_O}.elastic",
         f"{_O}.roles")),
    "launcher.tensorboard": (
        "TensorBoard with the run: a process the launcher owns, beside the chief or on this "
        "machine, outside the verdict",
        ("launcher.backends", "launcher.plan", f"{_O}.roles")),
    "launcher.tracking": (
        "every run in MLflow: the target (spec and environment), MLflow's REST API, what is "
        "new in model_dir, the tracker thread fed by the run's events",
        ("launcher.checks", "launcher.errors", "launcher.plan", "launcher.records",
         "launcher.redact", "launcher.spec", f"{_O}.tfformats")),
    "launcher.api": (
        "the composition root: `launcher.run()`, `dry_run()`; builds the backend, the plan,"
        " the monitors, the job loop; one `Run` (open, attach, close); the dry run's data",
        ("launcher.backends", "launcher.ending", "launcher.errors", "launcher.gpus",
         "launcher.job", "launcher.model_dir", "launcher.monitors", "launcher.output",
         "launcher.plan", "launcher.records", "launcher.signals",
         "launcher.spec", "launcher.tensorboard", "launcher.tracking", f"{_O}.coordinator")),
    "launcher": ("the package: `launcher.run`, `launcher.dry_run`", ("launcher.api",)),
    "launcher.commands": (
        "the commands besides running a job: `launch list/status/logs/cancel` (through the "
        "follower of the backend a run names), `--detach` (through its submitter), `launch "
        "report`, `launch tensorboard RUN`",
        ("launcher.api", "launcher.backends", "launcher.errors", "launcher.output",
         "launcher.plan", "launcher.records", "launcher.spec", "launcher.tensorboard",
         f"{_O}.metrics_file", f"{_O}.tfformats")),
    "launcher.cli": (
        "`launch`: a thin layer over the API and the commands",
        ("launcher", "launcher.api", "launcher.backends", "launcher.commands",
         "launcher.errors", "launcher.output", "launcher.records", "launcher.signals")),
}


def module_files() -> dict[str, Path]:
    out = {}
    for package in PACKAGES:
        for path in (REPO / package).rglob("*.py"):
            parts = list(path.relative_to(REPO).with_suffix("").parts)
            out[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    return out


def imported_names(module: str, source: str, is_package: bool = False) -> list[str]:
    """Every name ``module`` imports, anywhere in it (top level, functions, TYPE_CHECKING),
    relative imports made absolute: ``from . import x`` in a package names the package's
    ``x``."""
    package = module.split(".") if is_package else module.split(".")[:-1]
    names: list[str] = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            names += [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                base = ".".join(package[:len(package) - node.level + 1] + ([base] if base else []))
            names += [f"{base}.{a.name}" for a in node.names]
    return names


def import_graph() -> dict[str, set[str]]:
    """Module -> the project's modules it imports: at the top, inside functions, under
    TYPE_CHECKING alike, its own parent package included (``from launcher.backends import
    names`` in launcher/backends/slurm.py is an arrow to launcher/backends/__init__.py)."""
    files = module_files()

    def known(name: str) -> str | None:
        while name and name not in files:
            name = name.rpartition(".")[0]
        return name or None

    graph = {}
    for module, path in files.items():
        names = imported_names(module, path.read_text(), path.name == "__init__.py")
        graph[module] = {found for name in names
                         if (found := known(name)) and found != module}
    return graph


def room_of(module: str) -> str:
    """The folder a module lies in (below launcher/ or orchestrator/), else the module."""
    parts = module.split(".")
    if len(parts) == 1 or (len(parts) == 2 and (REPO / parts[0] / parts[1]).is_dir()):
        return module
    return ".".join(parts[:2]) if (REPO / parts[0] / parts[1]).is_dir() else module


def circles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected groups of more than one node (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    found = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        for w in sorted(graph.get(v, ())):
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


def room_graph(graph: dict[str, set[str]]) -> dict[str, set[str]]:
    rooms: dict[str, set[str]] = {room_of(m): set() for m in graph}
    for a, b, _, _ in room_arrows(graph):
        rooms[a].add(b)
    return rooms


def loops_named(graph: dict[str, set[str]]) -> list[str]:
    """Each loop between rooms, with the imports that make its edges."""
    arrows = room_arrows(graph)
    out = []
    for loop in circles(room_graph(graph)):
        edges = sorted(f"{m} -> {t}" for a, b, m, t in arrows if a in loop and b in loop)
        out.append(f"loop through {', '.join(loop)}: {'; '.join(edges)}")
    return out


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


def test_every_room_is_in_the_table():
    assert sorted({room_of(m) for m in module_files()} - set(ROOMS)) == []
    assert sorted(set(ROOMS) - {room_of(m) for m in module_files()}) == []


def test_the_import_graph_has_no_circle():
    """Between modules: lazy imports (inside functions), TYPE_CHECKING imports and a
    module's imports of its own parent package included."""
    assert circles(import_graph()) == []


def test_no_loop_between_rooms():
    """A folder is one room: two rooms that import each other, or a longer loop, fail here
    with the imports that make it."""
    assert loops_named(import_graph()) == []


def test_the_graph_sees_what_a_reader_sees():
    """The measure itself: an import inside a function, under TYPE_CHECKING, a relative one
    and one of the module's own parent package are all arrows; a folder is one room; two
    rooms that import each other are a loop named by its imports."""
    source = ("from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from a.b import c\n"
              "def f():\n    from . import d\n    from .. import e\nimport a.p.q\n")
    assert sorted(imported_names("a.p.m", source)) == \
        ["a.b.c", "a.e", "a.p.d", "a.p.q", "typing.TYPE_CHECKING"]
    assert "launcher.backends" in import_graph()["launcher.schema"]
    assert room_of("launcher.backends.slurm") == room_of("launcher.backends") == \
        "launcher.backends"
    assert room_of("launcher.api") == "launcher.api" and room_of("launcher") == "launcher"
    assert circles({"a": {"b"}, "b": {"a"}, "c": set()}) == [["a", "b"]]


def test_launcher_top_holds_at_most_18_modules():
    top = sorted(p.name for p in (REPO / "launcher").glob("*.py"))
    assert len(top) <= MAX_TOP_MODULES, top


def complexity_over(limit: int) -> list[str]:
    """Every function and method of launcher/ and orchestrator/ whose cyclomatic
    complexity (radon's measure) is above ``limit``: 'path:line name complexity'."""
    from radon.complexity import cc_visit
    from radon.visitors import Class

    over = []
    for path in sorted(p for root in ("launcher", "orchestrator")
                       for p in (REPO / root).rglob("*.py")):
        for block in cc_visit(path.read_text()):
            for f in block.methods if isinstance(block, Class) else [block]:
                if f.complexity > limit:
                    over.append(f"{path.relative_to(REPO)}:{f.lineno} {f.fullname} "
                                f"{f.complexity}")
    return over


def test_no_function_above_complexity_20():
    """A judge or a placement grown past 20 branches is split into named steps, each
    testable alone."""
    assert complexity_over(MAX_COMPLEXITY) == []
    assert complexity_over(15), "the measure sees no function at all"


def test_each_room_imports_only_what_the_table_allows():
    wrong = sorted(f"{m} imports {t} ({a} may not import {b})"
                   for a, b, m, t in room_arrows(import_graph()) if b not in ROOMS[a][1])
    assert wrong == []


def test_no_import_runs_back_up_the_floors():
    order = list(ROOMS)
    assert [f"{a} -> {b}" for a, (_, may) in ROOMS.items() for b in may
            if order.index(b) > order.index(a)] == []


def test_engine_modules_are_imported_only_inside_launcher_backends():
    """Every module of an engine (its helpers too: slurm_follow, ssh_copy...), as the
    registry says them."""
    assert sorted(f"{m} imports {t}" for m, ts in import_graph().items() for t in ts
                  if t in EVERY_ENGINE_MODULE and not m.startswith("launcher.backends")) == []


def test_every_module_of_backends_is_an_engines_the_agents_or_a_shared_helper():
    """A module of launcher/backends/ belongs to one engine (named ``<engine>.py`` or
    ``<engine>_*.py``, or a piece its registry line names), is the agent's (agent/), or is
    a helper named in SHARED_HELPERS: none is left over, none is two engines'."""
    here = [m for m in module_files() if m.startswith("launcher.backends.")
            and not m.startswith("launcher.backends.agent")]
    shared = {f"launcher.backends.{m}" for m in SHARED_HELPERS}
    assert sorted(m for m in here if m not in EVERY_ENGINE_MODULE and m not in shared) == []
    assert sorted(shared - set(here)) == [], "a shared helper named here is gone"
    assert sorted(shared & set(EVERY_ENGINE_MODULE)) == []
    owners = [m for ms in ENGINE_MODULES.values() for m in ms]
    assert len(owners) == len(set(owners)), "a module is two engines'"
    assert "launcher.backends.slurm_follow" in ENGINE_MODULES["slurm"]     # the measure


def test_an_engine_imports_no_other_engines_modules_and_the_shared_none():
    """Engines meet only in what they share: no module of one engine imports another
    engine's, and neither the shared helpers nor the agent import an engine's module."""
    wrong = sorted(f"{m} imports {t}" for m, ts in import_graph().items()
                   if m.startswith("launcher.backends.") for t in ts
                   if t in EVERY_ENGINE_MODULE
                   and EVERY_ENGINE_MODULE.get(m) != EVERY_ENGINE_MODULE[t])
    assert wrong == []


def test_engine_names_and_handle_keys_appear_only_under_launcher_backends():
    """No code outside launcher/backends/ says ``"slurm"`` or reads ``"slurm_job"``: what an
    engine is and how its handle names a run is the backend's (``"local"``, the launcher's
    own machine, is the default everywhere)."""
    words = {*ENGINES, "slurm_job"} - {"local"}
    found = sorted(f"{path.relative_to(REPO)}:{node.lineno} {node.value!r}"
                   for module, path in module_files().items()
                   if not module.startswith("launcher.backends")
                   for node in ast.walk(ast.parse(path.read_text()))
                   if isinstance(node, ast.Constant) and node.value in words)
    assert found == []


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


# Each engine with every module of it, and the modules every engine shares (the agent's
# included), imported together in one interpreter.
IMPORTED_TOGETHER = {**{name: list(ms) for name, ms in ENGINE_MODULES.items()},
                     "shared": [*(f"launcher.backends.{m}" for m in SHARED_HELPERS),
                                *(m for m in module_files()
                                  if m.startswith("launcher.backends.agent"))]}


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


@pytest.mark.parametrize("engine", IMPORTED_TOGETHER)
def test_importing_a_backend_does_not_import_the_job_loop(engine):
    """Any module of an engine (its submitter, its follower, its helpers) or a shared one."""
    loaded = modules_after_import(*IMPORTED_TOGETHER[engine])
    assert set(IMPORTED_TOGETHER[engine]) <= loaded
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
