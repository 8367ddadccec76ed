"""``"keras": "jax"`` through Slurm (the real cluster of this folder: two slurmd nodes on
this machine): one JAX process per node, each told its place by ``KERAS_DISTRIBUTION_*``,
train Keras 3 DataParallel to max_steps, and the allocation is released (docs/keras.md)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from support import REPO, run_launch
from test_slurm_backend import squeue

pytestmark = [pytest.mark.tf, pytest.mark.slow]
PY_JAX = str(REPO / ".venv-jax" / "bin" / "python")
JAX_FIT = str(REPO / "tests" / "keras" / "jobs" / "keras_jax_fit.py")


@pytest.mark.skipif(not Path(PY_JAX).exists(), reason="no .venv-jax (scripts/setup.sh)")
def test_keras_3_on_jax_runs_one_process_per_node_to_max_steps(tmp_path, slurm_env,
                                                               slurm_cluster):
    spec = tmp_path / "spec.json"
    spec.write_text(json.dumps({
        "name": "slurm-jax", "cluster": {"worker": ["a", "b"]}, "keras": "jax",
        "command": [PY_JAX, JAX_FIT], "workdir": str(REPO),
        "model_dir": str(tmp_path / "model"), "max_steps": 8, "backend": "slurm",
        "run_dir": str(tmp_path / "runs"), "resources": {"default": {"cpus": 1}},
        "slurm": {"partition": "debug", "time": "10"}}))
    done = run_launch(str(spec), timeout=300, env=slurm_env)
    assert done.returncode == 0, done.stderr
    for i in (0, 1):
        assert f"process {i} of 2: training done" in done.stdout
    assert "final checkpoint final.keras, 0 steps past max_steps 8" in done.stderr
    assert not squeue(slurm_cluster)
