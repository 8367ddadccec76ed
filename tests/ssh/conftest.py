"""Fixtures of the SSH tests: real hosts for the whole session (network namespaces on a
private /24, each with its own sshd; h3's sshd sees an empty tmpfs over ``private_dir``),
and a check that no test leaves a process on any of them or a local ssh behind.

pytest imports every conftest.py under the name ``conftest``, so after this one is loaded
``from conftest import run_launch`` (in any folder's tests) finds this module: it therefore
re-exports every helper of tests/conftest.py (not its fixtures, which pytest already
applies), as tests/coordinator/conftest.py does."""

from __future__ import annotations

import importlib.util
import json
import os
from pathlib import Path

import psutil
import pytest
from infra.netns_hosts import NetnsHosts, missing_prerequisites, start_hosts

PRIVATE_HOST = 3     # h3's tasks see an empty tmpfs over the session's private_dir


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
REPO, PY_TF215, marked_processes, wait_gone = (_root.REPO, _root.PY_TF215,
                                               _root.marked_processes, _root.wait_gone)


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
                      private={PRIVATE_HOST: str(private_dir)})
    yield bed
    bed.stop()


def local_ssh_processes() -> list[psutil.Process]:
    """ssh clients and masters started by this test session's launchers."""
    found = []
    for proc in marked_processes():
        try:
            if proc.name() == "ssh":
                found.append(proc)
        except psutil.Error:
            continue
    return found


@pytest.fixture(autouse=True)
def nothing_left_on_hosts(request):
    """Fails a test that leaves a process on any host, or an ssh process here."""
    yield
    if "hosts" not in request.fixturenames:
        return
    bed: NetnsHosts = request.getfixturevalue("hosts")
    left = bed.leftovers(timeout=15)
    local = wait_gone(local_ssh_processes, timeout=10)
    if left or local:
        bed.kill_all()
        for proc in local:
            proc.kill()
        pytest.fail(f"left running after the test: on hosts {left}; "
                    f"local ssh {[p.pid for p in local]}")


def write_spec(path: Path, bed: NetnsHosts, cluster: dict, **fields) -> Path:
    """A spec for the ssh backend on the test hosts; ``cluster`` names hosts h1..h3
    (``h2:2345`` with a port)."""
    def address(name: str) -> str:
        host, _, port = name.partition(":")
        if not (host.startswith("h") and host[1:].isdigit()):
            return name
        return bed.hosts[int(host[1:]) - 1].address + (f":{port}" if port else "")

    doc = {"name": "ssh-test", "backend": "ssh",
           "cluster": {job: [address(h) for h in names] for job, names in cluster.items()},
           "model_dir": str(path / "model"), "run_dir": str(path / "runs"),
           "workdir": str(REPO), "ssh": bed.ssh_section(),
           "timeouts": {"kill": 2, "finish": 10, "start": 30}}
    if "evaluator" in fields:
        fields["evaluator"] = address(fields["evaluator"])
    doc.update(fields)
    spec = path / "cluster.json"
    spec.write_text(json.dumps(doc, indent=2))
    return spec
