"""How the suite is shared among pytest-xdist workers (tests/conftest.py's scheduler): the
tests of one machine-wide bed (tests/infra; each started once per session by a session
fixture) in one worker, so each bed starts once and the beds run side by side; a module
whose tests share one real run in one worker; every other test alone, to whichever
worker is free. The scheduler sees only test ids, so a bed's tests are known by where they
are (xdist's own `--dist loadgroup` marks do not reach it under pytest 9.2: the worker's
suffix goes to a node attribute pytest no longer reads)."""

from __future__ import annotations

from pathlib import Path

from support import REPO

BED_FOLDERS = {"tests/slurm/": "slurm", "tests/ssh/": "ssh", "tests/docker/": "docker",
               "tests/tracking/": "mlflow"}
# The folders whose tests use the S3 server (tests/conftest.py's ``s3`` and ``storage``).
S3_FOLDERS = ("tests/coordinator/", "tests/orchestrator/", "tests/launcher/backends/")


def bed_group(nodeid: str) -> str | None:
    """The bed a test uses, from its id: its folder's, or "s3" for the tests of S3_FOLDERS
    on the S3 server (``[s3]`` parameters, ``s3`` in their names); None for the others."""
    for folder, group in BED_FOLDERS.items():
        if nodeid.startswith(folder):
            return group
    path, _, name = nodeid.partition("::")
    if path.startswith(S3_FOLDERS) and ("s3" in name or "s3" in Path(path).name):
        return "s3"
    return None


_SHARING: dict[str, bool] = {}


def shares_a_run(path: str) -> bool:
    """Whether a test module has a module-scoped fixture (one real run that its tests
    share): its tests then go to one worker, so the run happens once, not once per worker."""
    if path not in _SHARING:
        try:
            text = (REPO / path).read_text()
        except OSError:
            text = ""
        _SHARING[path] = 'scope="module"' in text
    return _SHARING[path]


def work_unit(nodeid: str) -> str:
    """What the scheduler hands a worker at once: a bed's tests, a module that shares a
    run, or a single test."""
    path = nodeid.partition("::")[0]
    return bed_group(nodeid) or (path if shares_a_run(path) else nodeid)
