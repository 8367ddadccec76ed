"""A stand-in trainer without TensorFlow that talks as TensorFlow jobs do: a deprecation
block, INFO chatter, a Keras-style progress bar redrawn with \\r, the user's own prints; the
chief saves a checkpoint (Estimator layout, through fsspec) every 0.3 s, 100 steps further,
and exits 0 at TFCLUSTER_MAX_STEPS, or raises at step FAIL_AT when that is set. Other tasks
wait, as a ps does."""

import os
import sys
import time
from pathlib import Path

import fsspec

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "coordinator"))
from tf_writes import FakeTrainer  # noqa: E402

print("WARNING:tensorflow:From train.py:1: RunConfig.__init__ (from tensorflow_estimator."
      "python.estimator.run_config) is deprecated and will be removed in a future version.")
print("Instructions for updating:")
print("Use tf.keras instead.")
print("INFO:tensorflow:Using config: {'_model_dir': 'm'}", flush=True)
if os.environ["TFCLUSTER_TASK"] != "chief:0":
    while True:
        time.sleep(1)


def deep(n):
    if n == 0:
        raise ValueError("the input pipeline ran dry")
    deep(n - 1)


url = os.environ["TFCLUSTER_MODEL_DIR"]
fs, _ = fsspec.core.url_to_fs(url)
trainer = FakeTrainer(fs, url)
max_steps = int(os.environ["TFCLUSTER_MAX_STEPS"])
fail_at = int(os.environ.get("FAIL_AT", "-1"))
for step in range(0, max_steps + 1, 100):
    if step == fail_at:
        deep(30)
    trainer.save(step)
    bar = "".join(f"{i}/10 [{'=' * i}{'.' * (10 - i)}]\r" for i in range(1, 11))
    print(f"{bar}epoch {step // 100} - loss: 0.{9 - step // 100}", flush=True)
    print(f"INFO:tensorflow:loss = 0.5, step = {step}")
    print(f"user print: saved step {step}", flush=True)
    time.sleep(0.3)
