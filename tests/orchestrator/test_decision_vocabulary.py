"""The decision vocabulary is checked by mypy (issue 38): a misspelled action is a type
error, and a dispatch that forgets an action fails at its ``assert_never``. mypy is run
on small modules written here, as a developer's checker would run on theirs."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import get_args

from orchestrator.decisions import Action, Decision

REPO = Path(__file__).resolve().parents[2]
DISPATCH = '''
from orchestrator.decisions import Action, assert_never

def act(action: Action) -> int:
    if action == "fail":
        return 1
    if action == "finish" or action == "lost":
        return 2
    if action == "restart" or action == "ignore"{more}:
        return 3
    assert_never(action)
'''


def mypy(tmp_path: Path, source: str) -> subprocess.CompletedProcess:
    probe = tmp_path / "probe.py"
    probe.write_text(source)
    return subprocess.run([sys.executable, "-m", "mypy", "--no-incremental",
                           "--python-version", "3.10", "--follow-imports=silent",
                           "--cache-dir", str(tmp_path / "cache"), str(probe)],
                          capture_output=True, text=True, cwd=tmp_path,
                          env={"MYPYPATH": str(REPO), "PATH": "/usr/bin:/bin"}, timeout=120)


def test_the_vocabulary_is_the_six_words():
    assert set(get_args(Action)) == {"finish", "fail", "lost", "restart", "ignore", "drop"}
    assert Decision("lost", "ps:0 does not answer", ("ps:0",)).task == "ps:0"


def test_a_misspelled_action_is_a_type_error(tmp_path):
    done = mypy(tmp_path, 'from orchestrator.decisions import Decision\n'
                          'Decision("fial", "a typo")\n')
    assert done.returncode == 1 and 'incompatible type "Literal[\'fial\']"' in done.stdout, \
        done.stdout + done.stderr


def test_a_dispatch_that_forgets_an_action_fails_the_check(tmp_path):
    forgot = mypy(tmp_path, DISPATCH.format(more=""))
    assert forgot.returncode == 1 and "Literal['drop']" in forgot.stdout, forgot.stdout
    every = mypy(tmp_path, DISPATCH.format(more=' or action == "drop"'))
    assert every.returncode == 0, every.stdout + every.stderr
