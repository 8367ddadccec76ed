"""The compose file generated from a spec (docker/compose_from_spec.py), run for real with
docker-compose: the chief, the workers and the evaluator end by themselves, the ps does
not (compose has no notion of a job's end), so the procedure of docs/docker.md stops it
with ``down``.

The spec is docker/cluster.json (the documented one) with a smaller cluster, for speed:
one worker instead of two (every role is still a service: chief, worker, ps, evaluator)
and max_steps 100 instead of 2000 (checkpoints at 0 and 100, each evaluated once)."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import time

import pytest
from docker_support import IMAGE
from support import REPO

pytestmark = [pytest.mark.tf, pytest.mark.slow]
PROJECT = "tfctest"
ENDING = ("chief", "worker-0", "evaluator")
MAX_STEPS = 100


def compose(compose_file, *args: str, timeout: float = 120) -> subprocess.CompletedProcess:
    return subprocess.run(["docker-compose", "-p", PROJECT, "-f", str(compose_file), *args],
                          capture_output=True, text=True, timeout=timeout)


def containers(compose_file, services: tuple[str, ...]) -> dict[str, str]:
    """The container id of each service, as `docker-compose ps -q SERVICE` names it."""
    ids = {}
    for service in services:
        found = compose(compose_file, "ps", "-q", service).stdout.split()
        assert found, f"no container for {service}"
        ids[service] = found[0]
    return ids


def states(engine, ids: dict[str, str]) -> dict[str, tuple[str, int]]:
    """Status and exit code of each service's container (one `docker inspect`: polled,
    and docker-compose is a Python program that costs ~0.5 CPU-s a call)."""
    out = engine.docker("inspect", "-f", "{{.State.Status}} {{.State.ExitCode}}",
                        *ids.values()).stdout.decode().splitlines()
    return {service: (line.split()[0], int(line.split()[1]))
            for service, line in zip(ids, out)}


@pytest.mark.skipif(shutil.which("docker-compose") is None, reason="needs docker-compose")
def test_the_generated_compose_file_runs_the_job_and_down_stops_the_ps(engine, image,
                                                                       tmp_path):
    spec = json.loads((REPO / "docker" / "cluster.json").read_text())
    spec["cluster"]["worker"] = spec["cluster"]["worker"][:1]
    spec.update(max_steps=MAX_STEPS, command=spec["command"] + ["--save-steps", "100"])
    spec_path = tmp_path / "cluster.json"
    spec_path.write_text(json.dumps(spec))
    made = subprocess.run([sys.executable, str(REPO / "docker" / "compose_from_spec.py"),
                           str(spec_path), "--image", IMAGE], capture_output=True, text=True,
                          cwd=REPO, timeout=60)
    assert made.returncode == 0, made.stderr
    compose_file = tmp_path / "docker-compose.yml"
    compose_file.write_text(made.stdout)
    try:
        up = compose(compose_file, "up", "-d", "--no-build")
        assert up.returncode == 0, up.stderr
        ids = containers(compose_file, (*ENDING, "ps-0"))
        deadline = time.monotonic() + 240
        while time.monotonic() < deadline:
            now = states(engine, ids)
            if all(now[s][0] == "exited" for s in ENDING):
                break
            time.sleep(1)
        assert {s: now[s] for s in ENDING} == {s: ("exited", 0) for s in ENDING}
        assert now["ps-0"][0] == "running"                           # compose never ends it
        volume = f"{PROJECT}_model"
        got = engine.docker("run", "--rm", "--mount", f"type=volume,src={volume},dst=/shared",
                            IMAGE, "cat", "/shared/model/checkpoint").stdout.decode()
        assert int(got.split('"', 2)[1].rsplit("-", 1)[1]) >= MAX_STEPS
    finally:
        down = compose(compose_file, "down", "-v", "--timeout", "10")
    assert down.returncode == 0, down.stderr
    assert engine.containers() == []
    assert f"{PROJECT}_model" not in engine.lines("volume", "ls", "--format", "{{.Name}}")
