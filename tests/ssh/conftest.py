"""Fixtures of the SSH tests: real hosts for the whole session (network namespaces on a
private /24, each with its own sshd; h3's sshd sees an empty tmpfs over ``private_dir``;
h1 and h2 see an /etc/hosts naming every host, so their own names resolve there, h3's not),
and a check that no test leaves a process on any of them or a local ssh behind."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from infra.netns_hosts import NetnsHosts, missing_prerequisites, start_hosts
from support import local_ssh_processes, nothing_left_on, wait_gone

PRIVATE_HOST = 3     # h3's tasks see an empty tmpfs over the session's private_dir
NAMED_HOSTS = {1, 2}  # their tasks resolve h1..h3 (an /etc/hosts of their own); h3's do not


@pytest.fixture(scope="session")
def private_dir(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("private-on-h3")


@pytest.fixture(scope="session")
def hosts(tmp_path_factory, private_dir) -> NetnsHosts:
    why = missing_prerequisites()
    if why:
        if os.environ.get("CI"):
            pytest.fail(f"SSH test hosts cannot be made: {why}")
        pytest.skip(f"SSH test hosts cannot be made: {why}")
    bed = start_hosts(tmp_path_factory.mktemp("netns-hosts"), count=3,
                      private={PRIVATE_HOST: str(private_dir)}, named=NAMED_HOSTS)
    yield bed
    bed.stop()


def _left_on(bed: NetnsHosts) -> dict[str, object]:
    """Processes on any host (given 15 s to end), and ssh processes here (10 s)."""
    return {"processes on hosts": bed.leftovers(timeout=15),
            "local ssh": wait_gone(local_ssh_processes, timeout=10)}


def _clear(bed: NetnsHosts, left: dict) -> None:
    bed.kill_all()
    for proc in left.get("local ssh", []):
        proc.kill()


# Fails a test that leaves a process on any host, or an ssh process here.
nothing_left_on_hosts = nothing_left_on("hosts", _left_on, _clear)
