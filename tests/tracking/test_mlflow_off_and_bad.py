"""Tracking off costs nothing (not one module of launcher/tracking/ imported), and a bad
$MLFLOW_TRACKING_URI or $MLFLOW_EXPERIMENT_NAME is one line, exit 2, nothing started:
through `launch` itself. The spec's own keys: tests/faults/bad_input_corpus.py."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
from support import REPO, run_launch


def spec_file(tmp_path, **more) -> str:
    marker = tmp_path / "started"
    doc = {"name": "tiny", "cluster": {"chief": 1}, "model_dir": str(tmp_path / "model"),
           "max_steps": 10, "command": ["touch", str(marker)], **more}
    path = tmp_path / "spec.json"
    path.write_text(json.dumps(doc))
    return str(path)


@pytest.mark.parametrize("env, line", [
    ({"MLFLOW_TRACKING_URI": "file:///tmp/mlruns"},
     "launch: error: MLFLOW_TRACKING_URI: scheme 'file' is not supported: give the http:// or "
     "https:// URL of an MLflow tracking server (tfcluster logs through its REST API)"),
    ({"MLFLOW_TRACKING_URI": "databricks"},
     "launch: error: MLFLOW_TRACKING_URI: scheme 'databricks' is not supported: give the "
     "http:// or https:// URL of an MLflow tracking server (tfcluster logs through its REST "
     "API)"),
    ({"MLFLOW_TRACKING_URI": "http://127.0.0.1:9", "MLFLOW_EXPERIMENT_NAME": "a\tb"},
     "launch: error: MLFLOW_EXPERIMENT_NAME holds a control character (a line break, a tab): "
     "give a plain name"),
])
def test_bad_environment_is_one_line_and_exit_2(tmp_path, env, line):
    done = run_launch(spec_file(tmp_path), env=env, timeout=60)
    assert done.returncode == 2
    assert done.stderr.strip().splitlines() == [line]
    assert not (tmp_path / "started").exists() and not (tmp_path / "model").exists()


def test_tracking_off_imports_nothing_of_it(tmp_path):
    code = ("import sys, launcher.api as api\n"
            f"r = api.run({spec_file(tmp_path)!r}, quiet=True, run_dir={str(tmp_path / 'run')!r})\n"
            "assert r.status == 0, r.reason\n"
            "print(sorted(m for m in sys.modules if m.startswith('launcher.tracking')))")
    env = {k: v for k, v in __import__("os").environ.items() if not k.startswith("MLFLOW_")}
    env["PYTHONPATH"] = str(REPO)
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=120, env=env, cwd=REPO, stdin=subprocess.DEVNULL)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.strip().splitlines()[-1] == "[]"
    assert (tmp_path / "started").exists()
