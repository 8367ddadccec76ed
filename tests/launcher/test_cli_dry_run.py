"""`launch SPEC --dry-run` imports only what showing the plan needs: the job loop, its
monitors, the closing and the console's libraries are imported inside launcher/api.py's
run-only functions (what that saves: bench/lazy_imports.py)."""

from __future__ import annotations

import json
import subprocess
import sys

from support import REPO

CODE = """
import contextlib, io, json, sys
from launcher import cli
with contextlib.redirect_stdout(io.StringIO()) as out:
    status = cli.main(["cluster_specs/estimator.json", "--dry-run"])
print(json.dumps([status, out.getvalue(), sorted(sys.modules)]))
"""

RUN_ONLY = {"launcher.job", "launcher.tasks", "launcher.monitors", "orchestrator.coordinator",
            "launcher.output.closing_report", "launcher.output.terminal",
            "launcher.output.live", "launcher.tensorboard", "launcher.tracking"}


def test_the_dry_run_imports_nothing_only_a_run_needs():
    done = subprocess.run([sys.executable, "-c", CODE], capture_output=True, text=True,
                          cwd=REPO, timeout=120)
    status, out, loaded = json.loads(done.stdout.strip().splitlines()[-1])
    assert status == 0 and "# job estimator" in out and "chief:0  " in out, done.stderr
    assert not set(loaded) & RUN_ONLY
    assert not {m for m in loaded if m.split(".")[0] in ("rich", "tensorflow")}
