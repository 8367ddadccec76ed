"""Specs for the ssh backend on the session's test hosts."""

from __future__ import annotations

import json
from pathlib import Path

from infra.netns_hosts import NetnsHosts
from support import REPO


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
