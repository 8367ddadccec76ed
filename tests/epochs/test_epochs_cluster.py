"""Epochs that mean epochs, on real clusters (ps jobs; chief + 1 or 2 workers): with the
helpers every example id is trained on exactly `epochs` times across the cluster and the
final checkpoint's global_step is the sum of every trainer's steps; the same job without them
(every trainer reads all the data) trains each example up to epochs x trainers times.

Every trainer prints the ids of each batch it trains on (`--log-ids`); the launcher keeps each
task's output in the run dir, where the test counts them. 2003 examples, batch 32: the shards
are uneven and every trainer's last batch is partial. The final checkpoint's step is read
from its files by orchestrator.checkpoints (the launcher's own reader, checked against
TensorFlow's checkpoints in tests/orchestrator), not by one more TensorFlow start per test;
that TensorFlow reads the newest checkpoint whole is tests/faults' check.
"""

from __future__ import annotations

import collections
import json
from pathlib import Path

import pytest
from support import PY_TF215, PY_TF221, run_launch

from orchestrator.checkpoints import CheckpointReader

pytestmark = pytest.mark.tf

EPOCHS, EXAMPLES, BATCH = 2, 2003, 32


def run_job(example: str, python: str, tmp_path: Path, *flags: str, workers: int = 2):
    spec = {
        "name": f"epochs-{example}",
        "cluster": {"chief": 1, "worker": workers, "ps": 1},
        "model_dir": str(tmp_path / "model"),
        "epochs": EPOCHS, "examples": EXAMPLES, "batch_size": BATCH,
        "timeouts": {"finish": 60},
    }
    if example == "pss":
        spec["strategy"] = "parameter_server"   # workers serve; the launcher stops them
    path = tmp_path / "spec.json"
    path.write_text(json.dumps(spec))
    run_dir = tmp_path / "run"
    proc = run_launch(str(path), "--quiet", "--run-dir", str(run_dir), "--", python,
                      f"examples/{example}/train.py", "--log-ids", *flags, timeout=400)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return run_dir


def batches_by_task(run_dir: Path) -> dict[str, list[list[int]]]:
    """task -> the id lists of the batches it trained on, from its log in the run dir."""
    out = {}
    for log in sorted((run_dir / "logs").glob("*.log")):
        rows = []
        for line in log.read_text(errors="replace").splitlines():
            if line.startswith("tfcluster-ids: ["):
                rows.append([int(v) for v in line.split("[", 1)[1].rstrip("]").split()])
        if rows:
            out[log.stem] = rows
    return out


def id_counts(batches: dict[str, list[list[int]]]) -> collections.Counter:
    return collections.Counter(i for rows in batches.values() for row in rows for i in row)


def final_global_step(model_dir: Path) -> int:
    """The step variable stored in the newest checkpoint's data (not the number in its
    name: an Estimator's ``model.ckpt-N`` can hold another step)."""
    reader = CheckpointReader(str(model_dir))
    ckpt = reader.newest_complete()
    assert ckpt is not None, f"no complete checkpoint in {model_dir}"
    step = reader.stored_step(ckpt)
    assert step is not None, f"no step variable in {ckpt.path}"
    return step


@pytest.mark.parametrize("example,python,trainers", [
    # two trainers each: a chief and a worker (Estimator), two workers (the PSS chief only
    # coordinates); their shards are uneven (1002 and 1001 examples)
    ("estimator", PY_TF215, ["chief-0", "worker-0"]),
    ("pss", PY_TF221, ["worker-0", "worker-1"]),
])
def test_each_example_is_trained_on_exactly_epochs_times(tmp_path, example, python, trainers):
    run_dir = run_job(example, python, tmp_path, workers=len(trainers) - (example != "pss"))
    batches = batches_by_task(run_dir)
    assert sorted(batches) == trainers
    counts = id_counts(batches)
    assert set(counts) == set(range(EXAMPLES))
    assert set(counts.values()) == {EPOCHS}
    steps = {task: len(rows) for task, rows in batches.items()}
    # uneven shards, partial last batches: each trainer's count is its shard's
    per_trainer = -(-EXAMPLES // len(trainers)) * EPOCHS
    assert max(len(r) for rows in batches.values() for r in rows) == BATCH
    assert all(len(rows[-1]) < BATCH for rows in batches.values())
    assert all(n <= -(-per_trainer // BATCH) for n in steps.values())
    # the final checkpoint holds every trainer's updates
    assert final_global_step(tmp_path / "model") == sum(steps.values()), steps


@pytest.mark.parametrize("example,python,trainers", [
    ("estimator", PY_TF215, 3),
    # one control shows the hazard; the PSS and MWMS tests above and below hold the fix
])
def test_without_the_helpers_every_trainer_reads_every_epoch(tmp_path, example, python,
                                                             trainers):
    run_dir = run_job(example, python, tmp_path, "--no-helpers")
    batches = batches_by_task(run_dir)
    counts = id_counts(batches)
    assert set(counts) == set(range(EXAMPLES))
    # Every trainer reads every epoch: examples are read up to epochs x trainers times
    # (the multiplied count) instead of exactly `epochs` times. The launcher ends the job
    # at max_steps (docs/ending.md), which can cut the last passes short: uneven counts.
    assert max(counts.values()) > EPOCHS
    assert max(counts.values()) <= EPOCHS * trainers


def test_mwms_auto_sharding_reads_each_example_once_per_epoch(tmp_path):
    """MultiWorkerMirroredStrategy with AutoShardPolicy.DATA (orchestrator.sharding): each
    task keeps its part of every global batch; the synchronous step count is the launcher's
    derived max_steps and the final checkpoint holds it."""
    spec = {"name": "epochs-mwms", "cluster": {"chief": 1, "worker": 1},
            "model_dir": str(tmp_path / "model"),
            "epochs": EPOCHS, "examples": EXAMPLES, "batch_size": BATCH}
    path = tmp_path / "spec.json"
    path.write_text(json.dumps(spec))
    run_dir = tmp_path / "run"
    proc = run_launch(str(path), "--quiet", "--run-dir", str(run_dir), "--", PY_TF221,
                      "examples/mwms/train.py", "--log-ids", timeout=400)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    batches = batches_by_task(run_dir)
    assert sorted(batches) == ["chief-0", "worker-0"]
    counts = id_counts(batches)
    assert set(counts) == set(range(EXAMPLES)) and set(counts.values()) == {EPOCHS}
    max_steps = json.loads((run_dir / "plan.json").read_text())["max_steps"]
    assert {len(rows) for rows in batches.values()} == {max_steps}
    assert final_global_step(tmp_path / "model") == max_steps
