"""GPUs on the docker backend (docs/gpus.md): this machine's stand-in nvidia-smi says it has
2 GPUs, and the test engine, like any engine without the NVIDIA Container Toolkit, has no
NVIDIA runtime: the job is refused in one line before any container starts."""

from __future__ import annotations

import json
import os

from docker_support import docker_spec
from support import fake_gpus, run_launch


def test_gpus_on_an_engine_without_the_nvidia_runtime_are_refused(engine, tmp_path):
    spec = tmp_path / "spec.json"
    spec.write_text(json.dumps(docker_spec(str(tmp_path / "m"), run_dir=str(tmp_path / "runs"))))
    env = {"PATH": f"{fake_gpus(tmp_path, 2)}:{os.environ['PATH']}"}
    done = run_launch(str(spec), env=env, timeout=120)
    assert done.returncode == 2, done.stderr
    line = done.stderr.strip().splitlines()[-1]
    assert line.startswith("launch: error: docker: chief:0, worker:0 get GPUs, but the engine "
                           "has no NVIDIA runtime (runtimes: ")
    assert "runc" in line and "nvidia-ctk runtime configure --runtime=docker" in line
    assert engine.containers() == []
