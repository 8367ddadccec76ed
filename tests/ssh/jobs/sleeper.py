"""A stand-in task that never ends by itself: it starts a grandchild in its own process group
(as TensorFlow's helpers may), prints "ready", and sleeps. Options by task name:
    --stubborn TASK   that task ignores SIGTERM (only SIGKILL ends it)
    --fail TASK       that task exits with status 3, 2 s after "ready"
    --serve TASK      that task answers the launcher's gRPC probe too (as any TF server)
    --until FILE      the chief exits 0 once FILE exists (its end of training)
A ps answers the launcher's gRPC probe as a TensorFlow ps does, and prints "answered
GetStatus" at each such call (the launcher asks once per start, then PINGs).
"""

import argparse
import os
import signal
import subprocess
import sys
import time

p = argparse.ArgumentParser()
p.add_argument("--stubborn", default="")
p.add_argument("--fail", default="")
p.add_argument("--serve", default="")
p.add_argument("--until", default="")
args = p.parse_args()
task = os.environ["TFCLUSTER_TASK"]
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))
from fake_tf_server import serve_get_status  # noqa: E402

server = serve_get_status(on_call=lambda: print("answered GetStatus", flush=True)) \
    if task.startswith("ps:") or task == args.serve else None   # as TensorFlow's ps
signal.signal(signal.SIGINT, signal.SIG_IGN)          # like a TensorFlow ps
if task == args.stubborn:
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
grandchild = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"])
print(f"ready {task} grandchild {grandchild.pid}", flush=True)
if task == args.fail:
    time.sleep(2)
    print(f"{task} fails now", flush=True)
    sys.exit(3)
while not (args.until and task == "chief:0" and os.path.exists(args.until)):
    time.sleep(0.5)
print(f"{task} found {args.until}: done", flush=True)
grandchild.kill()
grandchild.wait()
