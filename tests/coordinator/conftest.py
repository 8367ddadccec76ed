"""Fixtures of the coordinator tests: a real S3 server (SeaweedFS) for the session, and a
model_dir on local disk or on that server.

This conftest shadows tests/conftest.py as the module ``conftest`` for the tests in this
folder, so it re-exports the helpers tests import from there (``from conftest import
run_launch, PY_TF215``)."""

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


_root = _root_conftest()
REPO, PY_TF215, PY_TF221 = _root.REPO, _root.PY_TF215, _root.PY_TF221
run_launch, launch_cmd, tfcluster_tasks = _root.run_launch, _root.launch_cmd, _root.tfcluster_tasks


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
