"""A stand-in task for launcher tests (no TensorFlow): behaves by role as FAKE_PLAN says.

FAKE_PLAN is JSON: {"chief": "exit 0 after 1", "ps": "forever", "worker:1": "fail after 0.5",
"evaluator": "spawn-forever"...}; the most specific key (type:index, then type) wins.
Every task prints its TF_CONFIG task and writes its pid to $FAKE_PIDS/<type>-<index>.pid;
a ps answers the launcher's gRPC probe as a TensorFlow server does.
"""

import json
import os
import subprocess
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
from fake_tf_server import serve_get_status  # noqa: E402

config = json.loads(os.environ["TF_CONFIG"])
task = config["task"]
name = f"{task['type']}:{task['index']}"
server = serve_get_status(config) if task["type"] == "ps" else None  # as TensorFlow's
plan = json.loads(os.environ.get("FAKE_PLAN", "{}"))
behaviour = plan.get(name, plan.get(task["type"], "exit 0 after 0.5"))
if os.environ.get("FAKE_PIDS"):
    with open(os.path.join(os.environ["FAKE_PIDS"], f"{task['type']}-{task['index']}.pid"),
              "w") as f:
        f.write(str(os.getpid()))
print(f"hello from {name} argv={sys.argv[1:]!r}", flush=True)
words = behaviour.split()
if words[0] == "exit":
    time.sleep(float(words[3]))
    sys.exit(int(words[1]))
if words[0] == "fail":
    time.sleep(float(words[2]))
    raise RuntimeError(f"{name} broke on purpose")
if words[0] == "spawn-forever":
    # A child in the same process group: the launcher must end it too.
    subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"])
while True:  # "forever": like a ps blocked in server.join()
    time.sleep(0.2)
