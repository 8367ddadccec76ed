"""Keras 3 as a new user meets it on TensorFlow 2.21, with real processes: the
MultiWorkerMirroredStrategy failure named with its fix, the same script through the spec's
``"keras": "tf-keras"`` route to max_steps, and Keras 3 on JAX across two processes
(``"keras": "jax"``) to max_steps, its final checkpoint read back (docs/keras.md)."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest
from support import PY_TF221, REPO, launch_cmd, run_dir, run_launch

pytestmark = [pytest.mark.tf, pytest.mark.slow]
JOBS = Path(__file__).with_name("jobs")
MWMS_FIT = str(JOBS / "keras_mwms_fit.py")
JAX_FIT = str(JOBS / "keras_jax_fit.py")
PY_JAX = str(REPO / ".venv-jax" / "bin" / "python")


def _spec(tmp_path: Path, command: list[str], max_steps: int | None, **extra) -> str:
    """A 2-worker spec; ``max_steps`` None: the caller gives epochs/examples/batch_size."""
    spec = tmp_path / "spec.json"
    steps = {} if max_steps is None else {"max_steps": max_steps}
    spec.write_text(json.dumps({
        "name": "keras", "cluster": {"worker": 2}, "command": command,
        "model_dir": str(tmp_path / "model"), **steps,
        "run_dir": str(tmp_path / "runs"), **extra}))
    return str(spec)


def _summary(tmp_path: Path) -> dict:
    return json.loads((run_dir(tmp_path) / "summary.json").read_text())


def _status(tmp_path: Path) -> dict:
    done = subprocess.run(launch_cmd("status", str(run_dir(tmp_path)), "--json"),
                          capture_output=True, text=True, timeout=60, cwd=REPO)
    return json.loads(done.stdout)


def test_keras_3_under_mwms_fails_named_with_its_fix_in_three_lines(tmp_path):
    done = run_launch(_spec(tmp_path, [PY_TF221, MWMS_FIT], 10), timeout=300)
    assert done.returncode == 1, done.stderr
    lines = done.stderr.splitlines()
    error = next(i for i, line in enumerate(lines)
                 if line.startswith("tfcluster: worker:") and "PerReplica" in line)
    cause = next(i for i, line in enumerate(lines) if "cause: Keras 3" in line)
    fix = next(i for i, line in enumerate(lines) if "fix: " in line)
    # the exception, where it was raised, the cause, the fix: the cause and fix follow
    assert error < cause < fix <= error + 3
    assert '"keras": "tf-keras"' in lines[fix] and '"keras": "jax"' in lines[fix]
    # the tensor's values are folded, on the console and in the failure's box
    assert "lines of data (a tensor's values)" in done.stdout
    box = done.stderr.split("last lines of", 1)[1]
    assert "Traceback (most recent call last):" in box and "keras_mwms_fit.py" in box
    assert not any(line.strip(" |").startswith("[0.") for line in box.splitlines())
    known = _summary(tmp_path)["known_failure"]
    assert known["name"] == "keras3-distributed" and known["task"].startswith("worker:")
    assert _status(tmp_path)["verdict"]["known_failure"] == known


def test_the_tf_keras_route_runs_the_same_script_to_max_steps(tmp_path):
    done = run_launch(_spec(tmp_path, [PY_TF221, MWMS_FIT], 10, keras="tf-keras"),
                      timeout=300)
    assert done.returncode == 0, done.stderr
    assert "final checkpoint ckpt_2, 0 steps past max_steps 10" in done.stderr
    summary = _summary(tmp_path)
    assert (summary["final_step"], summary["known_failure"]) == (10, None)
    assert [t["exit"] for t in summary["tasks"]] == [0, 0]
    assert _status(tmp_path)["step"] == 10


@pytest.mark.skipif(not Path(PY_JAX).exists(), reason="no .venv-jax (scripts/setup.sh)")
def test_keras_3_on_jax_across_two_processes_ends_at_max_steps(tmp_path):
    # in epochs: each process fits its shard (shard_arrays) of 128 examples, 2 epochs of 16
    # per process: max_steps 2 x 64/16 = 8
    done = run_launch(_spec(tmp_path, [PY_JAX, JAX_FIT], None, keras="jax", epochs=2,
                            examples=128, batch_size=16), timeout=300)
    assert done.returncode == 0, done.stderr
    for i in (0, 1):
        assert f"process {i} of 2: training done" in done.stdout
        log = (run_dir(tmp_path) / "logs" / f"worker-{i}.log").read_text()
        assert f"tfcluster: reading shard {i} of 2 (shard_arrays)" in log
        assert "Epoch 2/2" in log
    assert "had no effect on the input" not in done.stderr    # the epochs note: not due
    # the final checkpoint, read back: Keras' own .keras file, its optimizer at step 8
    assert "final checkpoint final.keras, 0 steps past max_steps 8" in done.stderr
    summary = _summary(tmp_path)
    assert (summary["final_checkpoint"], summary["final_step"]) == ("final.keras", 8)
    status = _status(tmp_path)
    assert (status["state"], status["step"]) == ("succeeded", 8)
    model = tmp_path / "model"
    assert sorted(p.name for p in model.iterdir() if not p.name.startswith(".")) == \
        ["backup", "ckpt-1.weights.h5", "ckpt-2.weights.h5", "final.keras"]


@pytest.mark.skipif(not Path(PY_JAX).exists(), reason="no .venv-jax (scripts/setup.sh)")
@pytest.mark.parametrize("keras, python, words", [
    ("tf-keras", PY_JAX, "cannot import tensorflow"),
    ("jax", PY_TF221, "cannot import jax"),
])
def test_a_host_without_the_route_s_packages_is_refused_in_one_line(tmp_path, keras, python,
                                                                    words):
    done = run_launch(_spec(tmp_path, [python, JAX_FIT], 8, keras=keras), timeout=120)
    assert done.returncode == 2
    assert done.stderr.count("\n") == 1 and words in done.stderr, done.stderr
    assert f'(the spec\'s "keras": "{keras}")' in done.stderr
    assert not (tmp_path / "model").exists()       # nothing started, nothing written
    assert not list((tmp_path / "runs").glob("*/logs/*.log"))


@pytest.mark.skipif(not Path(PY_JAX).exists(), reason="no .venv-jax (scripts/setup.sh)")
def test_a_killed_jax_process_restarts_the_group_which_resumes_from_its_backup(tmp_path):
    done = run_launch(_spec(tmp_path, [PY_JAX, JAX_FIT], 12, keras="jax",
                            env={"KILL_AFTER_EPOCH": "1"}), timeout=300)
    assert done.returncode == 0, done.stderr
    assert "worker:1 was killed by SIGKILL; restarting the whole cluster from the newest " \
           "checkpoint in 1s (restart 1 of 3)" in done.stderr
    for task in ("worker-0", "worker-1"):
        log = (run_dir(tmp_path) / "logs" / f"{task}.log").read_text()
        again = log.split("starts (restart 1)", 1)[1]
        # the group started again resumes after epoch 1 (Keras' BackupAndRestore)
        assert "Epoch 1/3" not in again and "Epoch 2/3" in again
    summary = _summary(tmp_path)
    assert (summary["final_step"], [t["restarts"] for t in summary["tasks"]]) == (12, [1, 1])
