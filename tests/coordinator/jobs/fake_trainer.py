"""A stand-in task without TensorFlow: the chief saves a checkpoint (2 ps shards, files in
TensorFlow's order, through fsspec) every 0.2 s, 100 steps further each time, for ever (its
input repeats); every other task waits for ever, as a ps does. For model_dirs TensorFlow
2.15 cannot write itself (s3://)."""

import os
import sys
import time
from pathlib import Path

import fsspec

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))   # tests/: fake_tf_server
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))   # tests/coordinator: tf_writes
from tf_writes import FakeTrainer  # noqa: E402

if os.environ["TFCLUSTER_TASK"].startswith("ps:"):
    from fake_tf_server import serve_get_status

    server = serve_get_status()     # the launcher's gRPC probe gets its answer
if os.environ["TFCLUSTER_TASK"] != "chief:0":
    while True:
        time.sleep(1)
url = os.environ["TFCLUSTER_MODEL_DIR"]
fs, root = fsspec.core.url_to_fs(url)
trainer = FakeTrainer(fs, url, shards=2, keep_max=3)
step = 0
while True:
    trainer.save(step)
    print(f"saved step {step}", flush=True)
    step += 100
    time.sleep(0.2)
