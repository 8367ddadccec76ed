"""A stand-in chief for tracking tests (no TensorFlow): writes COUNT evaluations into
model_dir's tfcluster_metrics.jsonl (orchestrator/metrics_file.py's lines), one every SECS,
then exits 0. Usage: metrics_writer.py COUNT SECS. The values are ``loss = 1 / step`` and
``accuracy = step / 1000`` at steps 100, 200, ..."""

import json
import os
import sys
import time

count, secs = int(sys.argv[1]), float(sys.argv[2])
model_dir = os.environ["TFCLUSTER_MODEL_DIR"]
os.makedirs(model_dir, exist_ok=True)
for i in range(1, count + 1):
    step = 100 * i
    line = {"step": step, "checkpoint": f"{model_dir}/model.ckpt-{step}", "split": "eval",
            "metrics": {"loss": 1 / step, "accuracy": step / 1000}, "time": time.time()}
    with open(os.path.join(model_dir, "tfcluster_metrics.jsonl"), "a") as f:
        f.write(json.dumps(line) + "\n")
    print(f"evaluated step {step}", flush=True)
    time.sleep(secs)
