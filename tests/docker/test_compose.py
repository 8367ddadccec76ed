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


def state(engine, compose_file, service: str) -> tuple[str, int]:
    ids = compose(compose_file, "ps", "-q", service).stdout.split()
    assert ids, f"no container for {service}"
    out = engine.docker("inspect", "-f", "{{.State.Status}} {{.State.ExitCode}}", ids[0])
    status, code = out.stdout.decode().split()
    return status, int(code)


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
        deadline = time.monotonic() + 240
        while time.monotonic() < deadline:
            states = {s: state(engine, compose_file, s) for s in ENDING}
            if all(status == "exited" for status, _ in states.values()):
                break
            time.sleep(1)
        assert states == {s: ("exited", 0) for s in ENDING}
        assert state(engine, compose_file, "ps-0")[0] == "running"   # compose never ends it
        volume = f"{PROJECT}_model"
        got = engine.docker("run", "--rm", "--mount", f"type=volume,src={volume},dst=/shared",
                            IMAGE, "cat", "/shared/model/checkpoint").stdout.decode()
        assert int(got.split('"', 2)[1].rsplit("-", 1)[1]) >= MAX_STEPS
    finally:
        down = compose(compose_file, "down", "-v", "--timeout", "10")
    assert down.returncode == 0, down.stderr
    assert engine.containers() == []
    assert f"{PROJECT}_model" not in engine.lines("volume", "ls", "--format", "{{.Name}}")
