"""Fixtures for every test: a check that no test leaves a process of a tfcluster job
behind, a run root outside the checkout and a check that the session wrote nothing into
the checkout, the S3 server (``s3``, ``storage``), and the tests of each machine-wide bed
kept in one pytest-xdist worker.
Helpers are in support.py."""

from __future__ import annotations

import os
import signal
import subprocess
import uuid
from collections.abc import Iterator
from pathlib import Path

import psutil
import pytest
from infra.mlflow_server import MlflowServer, start_mlflow
from infra.s3 import S3Server, start_s3
from support import REPO, wait_gone
from work_units import work_unit

# A session started in the background (`cmd &` in a script, nohup, CI runners) inherits
# SIGINT and SIGHUP ignored, and so would every `launch` and shell it starts (`launch` keeps
# an inherited SIG_IGN: launcher/signals.py). The tests press Ctrl-C and close terminals as
# a user does: the session answers Ctrl-C, still ignores a hangup itself, and its children
# start with both at their defaults (a handler, unlike SIG_IGN, is not inherited).
if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
    signal.signal(signal.SIGINT, signal.default_int_handler)
if signal.getsignal(signal.SIGHUP) is signal.SIG_IGN:
    signal.signal(signal.SIGHUP, lambda *_: None)


@pytest.fixture(autouse=True)
def no_leftover_tasks():
    """Fails the test when a task of a tfcluster job outlives it (and then kills it)."""
    yield
    left = wait_gone(timeout=10.0)
    if left:
        desc = []
        for p in left:
            try:
                desc.append(f"{p.pid} {p.environ().get('TFCLUSTER_TASK')} {p.cmdline()[:3]}")
                p.kill()
            except psutil.NoSuchProcess:
                pass
        pytest.fail("processes left running after the test: " + "; ".join(desc))


@pytest.fixture
def scripted_backend():
    """``"backend": "scripted"`` (tests/scripted_backend.py) is registered while it runs."""
    from scripted_backend import scripted_registered

    with scripted_registered():
        yield


@pytest.fixture(scope="session")
def s3(tmp_path_factory) -> Iterator[S3Server]:
    """A real S3 server (SeaweedFS, tests/infra/s3.py) for the session: the "s3" bed."""
    server = start_s3(tmp_path_factory.mktemp("seaweedfs"))
    yield server
    server.stop()


@pytest.fixture(scope="session")
def mlflow_server(tmp_path_factory) -> Iterator[MlflowServer]:
    """A real MLflow tracking server (tests/infra/mlflow_server.py) for the session: the
    "mlflow" bed of tests/tracking (and of the Slurm requeue's tracking check)."""
    server = start_mlflow(tmp_path_factory.mktemp("mlflow"))
    yield server
    server.stop()


@pytest.fixture(params=["local", "s3"])
def storage(request, tmp_path):
    """(model_dir URL, fsspec filesystem, storage_options) on local disk or on S3."""
    if request.param == "local":
        import fsspec

        return str(tmp_path / "model"), fsspec.filesystem("file"), {}
    server: S3Server = request.getfixturevalue("s3")
    url = server.url(f"run-{uuid.uuid4().hex[:8]}/model")
    return url, server.filesystem(), server.storage_options()


@pytest.fixture
def runs(tmp_path, monkeypatch) -> dict[str, str]:
    """A run root of the test's own (TFCLUSTER_RUNS), for `launch` and for every command
    after it (`status`, `logs`, `cancel`): detached runs never land in the user's home."""
    monkeypatch.setenv("TFCLUSTER_RUNS", str(tmp_path / "runs"))
    return {"TFCLUSTER_RUNS": str(tmp_path / "runs")}


# ---------------------------------------------------------------- beds and workers
# `scripts/test.sh` runs the suite in several pytest-xdist workers; tests/work_units.py
# says which tests go to one worker together.
@pytest.hookimpl(optionalhook=True)
def pytest_xdist_make_scheduler(config: pytest.Config, log):
    """Work units (work_unit): a bed's tests together, a module that shares a run
    together, every other test alone; the biggest first."""
    from xdist.scheduler import LoadScopeScheduling

    class BedScheduling(LoadScopeScheduling):
        def _split_scope(self, nodeid: str) -> str:
            return work_unit(nodeid)

    return BedScheduling(config, log)


# ---------------------------------------------------------------- nothing in the checkout
# What the tests keep between sessions lives outside the checkout, under $TFCLUSTER_CACHE
# (default ~/.cache/tfcluster, as tests/infra/docker_engine.py's base image): the
# examples' generated data and Hypothesis' example database (else .hypothesis/ in the
# current directory; Hypothesis reads this variable at its first use).
CACHE = Path(os.environ.get("TFCLUSTER_CACHE") or Path.home() / ".cache" / "tfcluster")
os.environ.setdefault("HYPOTHESIS_STORAGE_DIRECTORY", str(CACHE / "hypothesis"))


@pytest.fixture(scope="session", autouse=True)
def run_root_outside_the_checkout(tmp_path_factory):
    """Runs whose spec names no run_dir land under $TFCLUSTER_RUNS, else under
    .tfcluster/runs of the current directory: the checkout, for `launch` run by the tests.
    One run root of the session's own (tests that list runs use the ``runs`` fixture), and
    the examples' data outside the checkout too."""
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("TFCLUSTER_RUNS", str(tmp_path_factory.mktemp("runs")))
        patch.setenv("TFCLUSTER_EXAMPLES_DATA", str(CACHE / "examples-data"))
        yield


LEFT_ALONE = ("__pycache__", ".egg-info", ".venv", ".pytest_cache", ".ruff_cache", ".mypy_cache")
_BEFORE = pytest.StashKey["set[str] | None"]()


def untracked_in_checkout() -> set[str] | None:
    """Untracked and ignored files and folders of the checkout (git's collapsed listing,
    interpreter caches and the virtual environments left out), with the runs under
    .tfcluster/runs named one by one; None outside a git checkout."""
    try:
        done = subprocess.run(["git", "-C", str(REPO), "status", "--porcelain", "--ignored"],
                              capture_output=True, text=True, timeout=60)
    except (OSError, subprocess.TimeoutExpired):
        return None
    if done.returncode != 0:
        return None
    found = {line[3:] for line in done.stdout.splitlines() if line[:2] in ("??", "!!")}
    found = {f for f in found if not any(part in f for part in LEFT_ALONE)}
    runs = REPO / ".tfcluster" / "runs"
    if runs.is_dir():
        found |= {f".tfcluster/runs/{name}" for name in sorted(p.name for p in runs.iterdir())}
    return found


def pytest_sessionstart(session: pytest.Session) -> None:
    if not hasattr(session.config, "workerinput"):     # the controller, or a plain run
        session.config.stash[_BEFORE] = untracked_in_checkout()


def pytest_sessionfinish(session: pytest.Session) -> None:
    """Fails the session when its tests wrote into the checkout (a file or folder git
    does not track, that was not there when the session started)."""
    before = session.config.stash.get(_BEFORE, None)
    after = untracked_in_checkout() if before is not None else None
    new = sorted(after - before) if after is not None and before is not None else []
    if new:
        reporter = session.config.pluginmanager.get_plugin("terminalreporter")
        if reporter is not None:
            reporter.write_line("tests wrote into the checkout: " + ", ".join(new), red=True)
        session.exitstatus = pytest.ExitCode.TESTS_FAILED

