"""A task that reports the devices it was given (tests/gpus).

Every start prints its CUDA_VISIBLE_DEVICES and writes it to
$GPU_REPORTS/<type>-<index>.<start>.json. The ps runs TensorFlow's own server (the
launcher's probe gets its answer), the only task that imports TensorFlow: the stand-in
GPUs (tests/fake_gpu) are nothing TensorFlow could use, and what the launcher gives a task
is its environment, which the trainers report without it (one TF import instead of five).
worker:1 kills itself (SIGKILL) at its first start; the chief exits 0 once worker:1
started twice; the others wait to be stopped. With DEVICES_TASK_PS=stand-in the ps answers
the probe through tests/fake_tf_server.py instead (tests/ssh/test_ssh_gpus.py: no TensorFlow).
"""

import glob
import json
import os
import signal
import socket
import sys
import time

config = json.loads(os.environ["TF_CONFIG"])
kind, index = config["task"]["type"], config["task"]["index"]
reports = os.environ["GPU_REPORTS"]
start = len(glob.glob(os.path.join(reports, f"{kind}-{index}.*.json")))
seen = {"task": f"{kind}:{index}", "start": start, "host": socket.gethostname(),
        "cuda_visible_devices": os.environ.get("CUDA_VISIBLE_DEVICES"),
        "restart_count": os.environ.get("TFCLUSTER_RESTART_COUNT")}
with open(os.path.join(reports, f"{kind}-{index}.{start}.json"), "w") as f:
    json.dump(seen, f)
print(f"{kind}:{index} start {start}: CUDA_VISIBLE_DEVICES="
      f"{seen['cuda_visible_devices']!r}", flush=True)

if kind == "ps" and os.environ.get("DEVICES_TASK_PS") == "stand-in":
    sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))
    from fake_tf_server import serve_get_status

    server = serve_get_status(config)
    while True:
        time.sleep(1)
if kind == "ps":
    import tensorflow as tf

    server = tf.distribute.Server(tf.train.ClusterSpec(config["cluster"]), job_name="ps",
                                  task_index=index, protocol="grpc", start=True)
    server.join()
if kind == "worker" and index == 1 and start == 0:
    os.kill(os.getpid(), signal.SIGKILL)
if kind == "chief":
    while len(glob.glob(os.path.join(reports, "worker-1.*.json"))) < 2:
        time.sleep(0.2)
    raise SystemExit(0)
while True:
    time.sleep(1)
