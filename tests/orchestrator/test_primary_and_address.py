"""orchestrator/roles.py's two helpers every room uses: the primary task (whose exit 0
means training finished) and a task's address as TF_CONFIG writes it."""

from __future__ import annotations

from dataclasses import dataclass

import pytest

from orchestrator.roles import host_port, primary_task, split_address


@dataclass
class Task:
    name: str


@pytest.mark.parametrize("names, primary", [
    (["ps:0", "chief:0", "worker:0", "worker:1", "evaluator:0"], "chief:0"),
    (["ps:0", "master:0", "worker:0"], "master:0"),
    (["ps:0", "worker:10", "worker:2", "worker:0"], "worker:0"),
    (["ps:0", "evaluator:0"], None),
])
def test_the_primary_is_the_chief_else_the_master_else_worker_0(names, primary):
    found = primary_task([Task(n) for n in names])
    assert (found.name if found else None) == primary


@pytest.mark.parametrize("host, port, address", [
    ("localhost", 2222, "localhost:2222"),
    ("10.0.0.7", 1, "10.0.0.7:1"),
    ("::1", 2222, "[::1]:2222"),
    ("fe80::1%eth0", 9000, "[fe80::1%eth0]:9000"),
])
def test_an_address_and_back(host, port, address):
    assert host_port(host, port) == address
    assert split_address(address) == (host, port)


def test_an_address_without_a_port_number_is_refused():
    with pytest.raises(ValueError):
        split_address("localhost:http")
