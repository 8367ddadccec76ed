"""The docs name the code as it is: every path of the checkout that README.md and
docs/*.md name (``launcher/...``, ``orchestrator/...``, ``bench/...``, ``tests/...``,
``scripts/...``, ``cluster_specs/...``, ``examples/...``) exists, so a reader who follows
one finds it after a refactor moved it.

The rule for docs/benchmarks.md: only its one-screen table of current figures (from its
top to the first section after "The current figures, on one screen") is checked; the
sections below are the history, measurements of their time, where a path may name a
module as it was then. A path with a pattern in it (``*``, ``<engine>``, ``{a,b}``,
``...``) names many and is not checked; ``path:line`` and ``file::test`` are checked as
the path."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
ROOTS = ("launcher", "orchestrator", "bench", "tests", "scripts", "cluster_specs", "examples")
# A root at the start of a path: not the tail of another path or a URL, a word or a module
# name (``launcher.backends`` is a module, not a path).
PATH = re.compile(rf"(?<![\w/.\-~$])(?:{'|'.join(ROOTS)})/[\w./\-*<>{{}},]*")
PATTERN = re.compile(r"[*<>{}]|\.\.\.")
CURRENT = "## The current figures, on one screen"


def docs() -> list[Path]:
    return [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]


def checked_text(path: Path) -> str:
    """What of a doc the rule checks: all of it, but docs/benchmarks.md's history."""
    text = path.read_text()
    if path.name == "benchmarks.md":
        head, _, rest = text.partition(CURRENT)
        text = head + CURRENT + rest.split("\n## ", 1)[0]
    return text


def named_paths(text: str) -> set[str]:
    """The checkout's paths ``text`` names, each as a path (no line, no test id, no
    sentence's closing punctuation); patterns left out."""
    out = set()
    for found in PATH.findall(text):
        path = found.split("::")[0].rstrip(".,;:)")
        if path.count(",") or PATTERN.search(path):
            continue
        out.add(re.sub(r":\d+(-\d+)?$", "", path))
    return out


def test_the_reader_finds_what_a_reader_reads():
    """The measure itself."""
    text = ("See `launcher/api.py:12`, tests/launcher/test_x.py::test_y, bench/a.py. "
            "Not launcher.backends, https://x/launcher/y.py, a/launcher/z.py, "
            "launcher/backends/<engine>_*.py nor examples/.../train.py.")
    assert named_paths(text) == {"launcher/api.py", "tests/launcher/test_x.py", "bench/a.py"}
    history = checked_text(REPO / "docs" / "benchmarks.md")
    assert "| measure | value | command | date |" in history
    assert "## Launch overhead" not in history


@pytest.mark.parametrize("doc", docs(), ids=lambda p: p.name)
def test_every_path_a_doc_names_exists(doc):
    missing = sorted(p for p in named_paths(checked_text(doc)) if not (REPO / p).exists())
    assert missing == [], f"{doc.relative_to(REPO)} names paths not in the checkout"
