"""The launcher's own failures (issue 21): never a traceback on the console; one line that
says it is the launcher's fault, and the full traceback saved to a file."""

from __future__ import annotations

import re
import tempfile

from launcher import cli


def test_the_cli_turns_any_launcher_bug_into_one_line(tmp_path, capsys, monkeypatch):
    from launcher import api

    def broken(*args, **kwargs):
        raise KeyError("a bug before the job")
    monkeypatch.setattr(api, "prepare", broken)
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    assert cli.main([str(tmp_path / "spec.json")]) == 1
    err = capsys.readouterr().err.strip().splitlines()
    saved = next(tmp_path.glob("tfcluster-launcher-error-*.txt"))
    assert len(err) == 1
    assert re.fullmatch(r"launch: launcher error \(a bug in tfcluster, not in the job\): "
                        r"KeyError: 'a bug before the job' at test_launcher_failures.py:\d+; "
                        f"full traceback in {re.escape(str(saved))}; please report it", err[0])
    assert "KeyError: 'a bug before the job'" in saved.read_text()
