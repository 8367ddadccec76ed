"""The image's ssh-host stage as real SSH hosts: two containers on a user-defined network,
each with its own sshd and address; the ssh backend runs the Estimator example across
them (the chief on one, the ps on the other: no worker, which would only cost CPU), model_dir
a folder both mount."""

from __future__ import annotations

import json
import signal
import socket
import subprocess
import time

import pytest
from support import run_launch

pytestmark = [pytest.mark.tf, pytest.mark.slow]
NETWORK = "tfc-test-sshnet"


def wait_port(address: str, port: int, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            with socket.create_connection((address, port), timeout=1) as s:
                if s.recv(4).startswith(b"SSH-"):
                    return
        except OSError:
            time.sleep(0.2)
    raise AssertionError(f"no sshd at {address}:{port} within {timeout:.0f}s")


@pytest.fixture
def ssh_hosts(engine, ssh_image, tmp_path):
    """Two ssh-host containers; their addresses, the ssh section, the shared folder."""
    key = tmp_path / "id_ed25519"
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(key)], check=True)
    shared = tmp_path / "shared"
    shared.mkdir()
    engine.docker("network", "create", NETWORK)
    names = [f"tfc-test-ssh{i}" for i in (1, 2)]
    try:
        for name in names:
            engine.docker("run", "-d", "--rm", "--init", "--name", name, "--network", NETWORK,
                          "--mount", f"type=bind,src={key}.pub,dst=/root/.ssh/authorized_keys,"
                                     "readonly",
                          "--mount", f"type=bind,src={shared},dst={shared}", ssh_image)
        addresses = [engine.docker("inspect", "-f", "{{range .NetworkSettings.Networks}}"
                                   "{{.IPAddress}}{{end}}", n).stdout.decode().strip()
                     for n in names]
        for address in addresses:
            wait_port(address, 22, 30)
        (tmp_path / "known_hosts").touch()
        section = {"user": "root", "identity_file": str(key),
                   "known_hosts_file": str(tmp_path / "known_hosts"),
                   "strict_host_key_checking": "accept-new", "config_file": "/dev/null",
                   "connect_timeout": 10}
        yield addresses, section, shared
    finally:
        engine.docker("rm", "-f", *names, check=False)
        engine.docker("network", "rm", NETWORK, check=False)


def test_the_ssh_backend_runs_a_job_across_two_ssh_host_containers(engine, ssh_hosts,
                                                                    tmp_path):
    (h1, h2), section, shared = ssh_hosts
    model_dir = shared / "model"
    spec = tmp_path / "spec.json"
    spec.write_text(json.dumps({
        "name": "sshc", "cluster": {"chief": [h1], "ps": [h2]},
        "command": ["python", "examples/estimator/train.py", "--save-steps", "100"],
        "workdir": "/opt/tfcluster", "model_dir": str(model_dir), "max_steps": 100,
        "backend": "ssh", "ssh": section, "timeouts": {"kill": 5, "start": 240}}))
    run_dir = tmp_path / "run"
    done = run_launch(str(spec), "--run-dir", str(run_dir), "--quiet", timeout=300)
    assert done.returncode == 0, done.stderr
    rows = {r["task"]: r for r in json.loads((run_dir / "summary.json").read_text())["tasks"]}
    assert rows["ps:0"]["exit"] == -signal.SIGTERM and rows["ps:0"]["stopped"]
    assert rows["chief:0"]["exit"] == 0
    assert {r["address"].rsplit(":", 1)[0] for r in rows.values()} == {h1, h2}
    state = (model_dir / "checkpoint").read_text()
    assert int(state.split('"', 2)[1].rsplit("-", 1)[1]) >= 100
    for name in ("tfc-test-ssh1", "tfc-test-ssh2"):      # nothing of the job left there
        assert not [c for c in commands_in(engine, name) if "train.py" in c]


def commands_in(engine, container: str) -> list[str]:
    """The command line of every process in the container (sshd's included)."""
    done = engine.docker("exec", container, "python3", "-c", LIST_PROCESSES)
    found = json.loads(done.stdout)
    assert any("sshd" in c for c in found)
    return found


LIST_PROCESSES = """
import json, os
out = []
for pid in filter(str.isdigit, os.listdir("/proc")):
    try:
        out.append(open(f"/proc/{pid}/cmdline", "rb").read().replace(b"\\0", b" ").decode())
    except OSError:
        pass
print(json.dumps(out))
"""
