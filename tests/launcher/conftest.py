"""Fixtures of the launcher's room tests: the scripted backend is registered while they run."""

from __future__ import annotations

import pytest
from scripted_backend import scripted_registered


@pytest.fixture(autouse=True)
def scripted_backend_registered():
    with scripted_registered():
        yield
