"""Helpers of the Docker tests (tests/docker): the images' names, specs for the docker
backend, commands run in a container."""

from __future__ import annotations

import subprocess

from infra.docker_engine import DockerEngine

IMAGE = "tfcluster:tf2.15"
SSH_IMAGE = "tfcluster-ssh:tf2.15"
BUILD_TIMES: dict[str, float] = {}


def run_in(engine: DockerEngine, image: str, *argv: str, workdir: str | None = None,
           timeout: float = 120) -> subprocess.CompletedProcess:
    """``docker run --rm IMAGE ARGV...`` on the test engine; stdout and stderr as text."""
    where = ["--workdir", workdir] if workdir else []
    done = engine.docker("run", "--rm", "--init", "--network", "host", *where, image, *argv,
                         check=False, timeout=timeout)
    return subprocess.CompletedProcess(done.args, done.returncode,
                                       done.stdout.decode(errors="replace"),
                                       done.stderr.decode(errors="replace"))


def docker_spec(model_dir: str, volumes: list[str] | None = None, **overrides) -> dict:
    """The Estimator example (chief, 2 workers, ps, evaluator) for the docker backend."""
    spec = {
        "name": "dk",
        "cluster": {"chief": ["localhost"], "worker": ["localhost", "localhost"],
                    "ps": ["localhost"]},
        "evaluator": "localhost",
        "command": ["python", "examples/estimator/train.py", "--save-steps", "100"],
        "model_dir": model_dir,
        "max_steps": 300,
        "backend": "docker",
        "docker": {"image": IMAGE, "volumes": list(volumes or [])},
        # a container's TensorFlow server on a loaded 2-core machine (the suite beside two
        # CPU-bound processes) took more than the default 60 s to answer its first probe
        "timeouts": {"kill": 5, "start": 240},
    }
    spec.update(overrides)
    return spec
