"""An evaluator whose checkpoint is deleted under it, every time on its first start: what
``keep_checkpoint_max`` does to TensorFlow's evaluator by chance, made certain for a test.

On its first start (``TFCLUSTER_RESTART_COUNT`` 0) it waits for the chief's first
checkpoint, deletes that checkpoint's files (as the chief's Saver does once
``keep_checkpoint_max`` newer ones exist) and has TensorFlow 2.15's Estimator evaluate it:
TensorFlow's own restore fails with its own traceback ("The passed save_path is not a valid
checkpoint"). Once restarted, it is the stock script's evaluator (tests/thirdparty/
stock_estimator.py, the arguments as given), which evaluates until max_steps."""

import glob
import os
import runpy
import sys
import time

STOCK = os.path.join(os.path.dirname(__file__), "..", "..", "thirdparty", "stock_estimator.py")

if os.environ.get("TFCLUSTER_RESTART_COUNT", "0") != "0":
    sys.argv[0] = STOCK
    runpy.run_path(STOCK, run_name="__main__")
    sys.exit(0)

import tensorflow as tf  # noqa: E402

model_dir = os.environ["TFCLUSTER_MODEL_DIR"]
while True:
    found = sorted(glob.glob(os.path.join(model_dir, "model.ckpt-*.index")))
    if found:
        break
    time.sleep(0.2)
path = found[0][:-len(".index")]
for name in glob.glob(path + ".*"):
    os.remove(name)
columns = [tf.feature_column.numeric_column(k) for k in ("sex", "age", "fare", "class")]
estimator = tf.estimator.LinearClassifier(columns, model_dir=model_dir)
estimator.evaluate(lambda: tf.data.Dataset.from_tensors(
    ({k: [0.0] for k in ("sex", "age", "fare", "class")}, [0])), steps=1, checkpoint_path=path)
