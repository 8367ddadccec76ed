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


# `launch`'s own process ends inside main() once its output is flushed, skipping the
# interpreter's tear-down; anything the tear-down would still do keeps it.
EXIT = """
import atexit, os, sys, threading, time
from launcher import cli

real_exit = os._exit
os._exit = lambda status: (os.write(1, b"ended in main\\n"), real_exit(status))
if "--atexit" in sys.argv:
    sys.argv.remove("--atexit")
    atexit.register(lambda: print("atexit ran", flush=True))
if "--thread" in sys.argv:
    sys.argv.remove("--thread")
    def outlive_main():     # alive whatever main() takes (a fixed sleep raced a loaded machine)
        while threading.main_thread().is_alive():
            time.sleep(0.05)
        print("thread ended", flush=True)
    threading.Thread(target=outlive_main).start()
sys.exit(cli.main())
"""


def _launch_process(*argv: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", EXIT, *argv], capture_output=True,
                          text=True, cwd=REPO, timeout=60)


def _spec(tmp_path, workers: int) -> str:
    spec = tmp_path / "spec.json"
    spec.write_text(json.dumps({"name": "wide", "cluster": {"chief": 1, "worker": workers},
                                "command": ["python", "train.py"],
                                "model_dir": str(tmp_path / "model")}))
    return str(spec)


def test_launch_ends_in_main_with_its_output_whole(tmp_path):
    done = _launch_process(_spec(tmp_path, 300), "--dry-run", "--json", "--all")
    assert done.returncode == 0, done.stderr
    text, said = done.stdout.rsplit("\n", 2)[0], done.stdout.rsplit("\n", 2)[1]
    assert said == "ended in main"            # the tear-down was skipped...
    plan = json.loads(text)                   # ...and every byte was written first
    assert len(plan["tasks"]) == 301


def test_an_atexit_callback_or_a_live_thread_keeps_the_interpreters_exit(tmp_path):
    spec = _spec(tmp_path, 2)
    ran = _launch_process(spec, "--dry-run", "--atexit")
    assert ran.returncode == 0 and "atexit ran" in ran.stdout
    assert "ended in main" not in ran.stdout
    waited = _launch_process(spec, "--dry-run", "--thread")
    assert waited.returncode == 0 and "thread ended" in waited.stdout
    assert "ended in main" not in waited.stdout
