"""Fixtures of the coordinator tests: a real S3 server (SeaweedFS) for the session, and a
model_dir on local disk or on that server."""

from __future__ import annotations

import uuid

import pytest
from infra.s3 import S3Server, start_s3


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
