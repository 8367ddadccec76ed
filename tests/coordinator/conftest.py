"""Fixtures of the coordinator tests: a real S3 server (SeaweedFS) for the session, and a
model_dir on local disk or on that server.

pytest imports every conftest.py under the name ``conftest``, so after this one is loaded
``from conftest import run_launch`` (in any folder's tests) finds this module: it therefore
re-exports every helper of tests/conftest.py (not its fixtures, which pytest already
applies)."""

from __future__ import annotations

import importlib.util
import uuid
from pathlib import Path

import pytest
from infra.s3 import S3Server, start_s3


def _root_conftest():
    path = Path(__file__).resolve().parent.parent / "conftest.py"
    spec = importlib.util.spec_from_file_location("tfcluster_tests_root_conftest", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _is_fixture(obj) -> bool:
    return hasattr(obj, "_pytestfixturefunction") or \
        type(obj).__name__ == "FixtureFunctionDefinition"


_root = _root_conftest()
globals().update({name: value for name, value in vars(_root).items()
                  if not name.startswith("_") and name not in globals()
                  and not _is_fixture(value)})
REPO, PY_TF215, launch_cmd, run_launch = _root.REPO, _root.PY_TF215, _root.launch_cmd, \
    _root.run_launch


@pytest.fixture(scope="session")
def s3(tmp_path_factory) -> S3Server:
    server = start_s3(tmp_path_factory.mktemp("seaweedfs"))
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
