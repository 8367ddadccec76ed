"""The real Slurm cluster of this folder's tests: one for the whole session, and a check
that no test leaves a job (an allocation, a batch job) in it."""

from __future__ import annotations

import os

import pytest
from infra.slurm_cluster import SlurmCluster, missing_programs
from support import nothing_left_on, wait_gone


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


def _left_in(cluster: SlurmCluster) -> dict[str, list[str]]:
    """Jobs squeue still shows once a cancelled one had 30 s to end."""
    return {"jobs": wait_gone(cluster.jobs, timeout=30)}


def _cancel(cluster: SlurmCluster, left: dict) -> None:
    cluster.run("scancel", "--full", *left["jobs"], check=False)


# Fails a test that leaves a job in the cluster (then cancels it).
nothing_left_in_the_cluster = nothing_left_on("slurm_cluster", _left_in, _cancel)
