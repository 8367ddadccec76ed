"""bench/house_figures.py measures any tree: the figures it finds, "absent" for code that
is gone, never a crash (a refactor moves things)."""

from __future__ import annotations

import re
import subprocess
import sys

from support import REPO

API = '''
def exit_of(e):
    if isinstance(e, UsageError):
        return 2
    if isinstance(e, KeyboardInterrupt):
        return 130
    if isinstance(e, Terminated):
        return 128 + e.args[0]
    return getattr(e, "status", 1)
'''


def figures(tree) -> dict[str, str]:
    done = subprocess.run([sys.executable, str(REPO / "bench" / "house_figures.py"), str(tree)],
                          capture_output=True, text=True, timeout=120, check=True)
    return dict(re.split(r"\s{2,}", line, maxsplit=1) for line in done.stdout.splitlines())


def test_a_tree_without_the_measured_code_says_absent(tmp_path):
    (tmp_path / "launcher" / "backends").mkdir(parents=True)
    (tmp_path / "orchestrator").mkdir()
    (tmp_path / "launcher" / "api.py").write_text(API)
    (tmp_path / "launcher" / "backends" / "base.py").write_text(
        "class Backend:\n    def __new__(cls):\n        pass\n")
    (tmp_path / "launcher" / "job.py").write_text("def end_step(self, a, b, *, c):\n    pass\n")
    got = figures(tmp_path)
    assert got["launcher/api.py"] == f"{len(API.splitlines())} lines"
    assert got["getattr calls in api.py"] == "1"
    assert got["exception-to-exit-status maps"] == "1 (launcher.api.exit_of)"
    assert got["Job class"] == got["launcher/backends/ssh.py"] == "absent"
    assert got["__new__ in launcher/backends/"] == "1" and got["end_step parameters"] == "3"
    assert got["biggest class in launcher/backends/"].startswith("Backend: 3 lines / 1 methods")


def test_this_tree_has_every_figure():
    got = figures(REPO)
    assert "absent" not in got["launcher/api.py"] and got["getattr calls in api.py"] == "0"
    assert got["import circles"] == got["loops between rooms"] == "0"
