"""The MLflow tracking server of tests/tracking (tests/infra/mlflow_server.py), once a session."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from infra.mlflow_server import MlflowServer, start_mlflow


@pytest.fixture(scope="session")
def mlflow_server(tmp_path_factory) -> Iterator[MlflowServer]:
    server = start_mlflow(tmp_path_factory.mktemp("mlflow"))
    yield server
    server.stop()
