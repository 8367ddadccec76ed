"""The console's libraries stay out of `launch`'s start-up: `--help` loads neither rich
(the live view) nor matplotlib (launch report) nor fsspec."""

from __future__ import annotations

import json
import subprocess
import sys

from support import REPO

CODE = """
import json, sys
from launcher import cli
try:
    cli.main(["--help"])
except SystemExit:
    pass
print(json.dumps(sorted(sys.modules)), file=sys.stderr)
"""


def test_help_loads_neither_rich_nor_matplotlib():
    done = subprocess.run([sys.executable, "-c", CODE], capture_output=True, text=True,
                          cwd=REPO, timeout=60)
    loaded = set(json.loads(done.stderr.strip().splitlines()[-1]))
    assert "--verbose" in done.stdout
    assert not {m for m in loaded if m.split(".")[0] in ("rich", "matplotlib", "fsspec")}
    assert not loaded & {"launcher.api", "launcher.output.live", "launcher.output.noise"}


def test_a_local_job_does_not_import_fsspec_for_its_environment_checks(tmp_path):
    code = ("import sys\n"
            "from launcher.backends.environment import check_fsspec_driver, check_run_dir\n"
            f"check_fsspec_driver({str(tmp_path / 'model')!r})\n"
            f"check_run_dir({str(tmp_path / 'runs')!r})\n"
            "print('fsspec' in sys.modules)")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          cwd=REPO, timeout=60)
    assert done.stdout.strip() == "False", done.stderr
