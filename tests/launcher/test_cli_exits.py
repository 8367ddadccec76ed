"""One map from how the launcher ended to its exit status (launcher.errors.exit_of): what
``launch`` returns and prints, and what the run's state.json records when ``launcher.run``
ended the same way, agree."""

from __future__ import annotations

import json
import re
import signal
import sys
import tempfile

import pytest

import launcher
from launcher import cli
from launcher.backends.local import LocalBackend
from launcher.errors import LauncherFailed, PreflightError, Terminated

SPEC = {"name": "exits", "cluster": {"chief": 1}, "model_dir": "m", "max_steps": 10,
        "command": [sys.executable, "-c", "pass"]}

ENDS = [
    (PreflightError("host h: unreachable"), 2, "launch: error: host h: unreachable",
     "host h: unreachable"),
    (KeyboardInterrupt(), 130, "launch: interrupted", "interrupted by SIGINT"),
    (Terminated(signal.SIGTERM), 143, "launch: interrupted by SIGTERM",
     "interrupted by SIGTERM"),
    (LauncherFailed("the run directory vanished"), 1, "launch: the run directory vanished",
     "the run directory vanished"),
    (KeyError("a bug"), 1, r"launch: launcher error \(a bug in tfcluster, not in the job\): "
     r"KeyError: 'a bug' at .*; full traceback in .*; please report it",
     r"launcher error \(a bug in tfcluster, not in the job\): KeyError: 'a bug' at .*"),
]


@pytest.mark.parametrize("error, status, line, reason", ENDS,
                         ids=lambda v: type(v).__name__ if isinstance(v, BaseException) else "")
def test_launch_and_the_run_record_agree_on_each_end(tmp_path, monkeypatch, capsys, error,
                                                     status, line, reason):
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))     # a bug's saved traceback

    def preflight(self, plan):
        raise error
    monkeypatch.setattr(LocalBackend, "preflight", preflight)
    path = tmp_path / "spec.json"
    path.write_text(json.dumps(SPEC))

    assert cli.main([str(path), "--run-dir", str(tmp_path / "cli")]) == status
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and re.fullmatch(line, err[0]), err

    with pytest.raises((type(error), LauncherFailed)):
        launcher.run(str(path), run_dir=str(tmp_path / "api"), quiet=True)
    for run_dir in ("cli", "api"):
        state = json.loads((tmp_path / run_dir / "state.json").read_text())
        assert state["status"] == status and re.fullmatch(reason, state["reason"]), state
