"""The real Slurm cluster of this folder's tests: one for the whole session."""

from __future__ import annotations

import os

import pytest
from infra.slurm_cluster import SlurmCluster, missing_programs


@pytest.fixture(scope="session")
def slurm_cluster():
    problems = missing_programs()
    if os.geteuid() != 0:
        problems.append("root (slurmd and munged run as root here)")
    if problems:
        message = "Slurm test cluster needs: " + ", ".join(problems)
        if os.environ.get("CI") == "true":
            pytest.fail(message)
        pytest.skip(message)
    cluster = SlurmCluster(nodes=2).start()
    try:
        yield cluster
    finally:
        cluster.stop()


@pytest.fixture
def slurm_env(slurm_cluster, monkeypatch):
    """SLURM_CONF for this test process (helpers like job_state) and for `launch`."""
    monkeypatch.setenv("SLURM_CONF", str(slurm_cluster.conf))
    return slurm_cluster.env
