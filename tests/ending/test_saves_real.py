"""Nothing is stopped in the middle of its work, on real TensorFlow (2.15): Kubeflow's
MultiWorkerMirroredStrategy Keras example (tests/thirdparty/kubeflow_keras_mwms.py), two
workers, 2 epochs of 5 steps. After its last epoch's checkpoint reaches max_steps, every
worker calls model.save; with timeouts.finish at 2 s (shorter than any save), the
launcher used to SIGKILL them in the middle of it. The synchronous workers that all still
run are waited for: both end by themselves, the job exits 0, and the SavedModel is whole:
TensorFlow loads it and it predicts."""

from __future__ import annotations

import json
import os
import subprocess

import pytest
from support import PY_TF215, REPO
from thirdparty_jobs import launch, shell

pytestmark = pytest.mark.tf


def test_every_mwms_worker_finishes_its_model_save_and_the_savedmodel_is_whole(tmp_path):
    export = tmp_path / "export"
    proc, summary, events = launch(tmp_path, {
        "name": "kubeflow-mwms", "cluster": {"worker": 2}, "strategy": "multi_worker_mirrored",
        "max_steps": 10, "timeouts": {"finish": 2, "poll": 0.5},
        "command": shell("kubeflow_keras_mwms.py", "--checkpoint_dir", "$TFCLUSTER_MODEL_DIR",
                         "--saved_model_dir", str(export))})
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert summary["training"] == "finished" and summary["cut_short"] == []
    assert [(t["task"], t["exit"], t["stopped"]) for t in summary["tasks"]] == \
        [("worker:0", 0, False), ("worker:1", 0, False)]
    assert not [e for e in events if e["event"] == "stopping"], "a worker was stopped"
    for path in (export, export / "worker_tmp_1"):
        assert (path / "saved_model.pb").is_file() and \
            (path / "variables" / "variables.index").is_file(), path
    check = ("import sys, numpy as np, tensorflow as tf\n"
             "model = tf.keras.models.load_model(sys.argv[1])\n"
             "print(model.predict(np.zeros((3, 28, 28, 1), np.float32), verbose=0).shape)\n")
    done = subprocess.run([PY_TF215, "-c", check, str(export)], capture_output=True, text=True,
                          timeout=180, cwd=REPO, stdin=subprocess.DEVNULL,
                          env=dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2"))
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.strip().splitlines()[-1] == "(3, 10)"
    assert json.loads((tmp_path / "run" / "state.json").read_text())["state"] == "succeeded"
