"""Fixtures of the Docker tests: one private engine for the session (tests/infra/
docker_engine.py), the images built on it once, and a check that no test leaves a
container or a network behind."""

from __future__ import annotations

import os

import pytest
from docker_support import BUILD_TIMES, IMAGE, SSH_IMAGE
from infra.docker_engine import DockerEngine, missing_prerequisites, start_engine
from support import nothing_left_on, wait_gone


@pytest.fixture(scope="session")
def engine() -> DockerEngine:
    why = missing_prerequisites()
    if why:
        if os.environ.get("CI"):
            pytest.fail(f"no Docker engine for the tests: {why}")
        pytest.skip(f"no Docker engine for the tests: {why}")
    engine = start_engine()
    saved = {k: os.environ.get(k) for k in engine.env()}
    os.environ.update(engine.env())     # launch, run by the tests, talks to this engine
    yield engine
    for key, value in saved.items():
        if value is None:
            os.environ.pop(key, None)
        else:
            os.environ[key] = value
    engine.stop()


@pytest.fixture(scope="session")
def image(engine: DockerEngine) -> str:
    """docker/Dockerfile's runtime image, built on the local debootstrap base."""
    BUILD_TIMES["runtime"] = engine.build(IMAGE, base=engine.base_image())
    return IMAGE


@pytest.fixture(scope="session")
def ssh_image(engine: DockerEngine, image: str) -> str:
    BUILD_TIMES["ssh-host"] = engine.build(SSH_IMAGE, base=engine.base_image(),
                                           target="ssh-host")
    return SSH_IMAGE


def _left_on(engine: DockerEngine) -> dict[str, list[str]]:
    """Containers (given 10 s to go) and networks the tests made."""
    left = wait_gone(engine.containers, timeout=10)
    nets = [n for n in engine.lines("network", "ls", "--format", "{{.Name}}")
            if n not in ("host", "none", "bridge")]
    return {"containers": left, "networks": nets}


# Fails a test that leaves a container or a network on the engine (then removes them).
nothing_left_on_the_engine = nothing_left_on("engine", _left_on,
                                             lambda engine, left: engine.remove_all())
