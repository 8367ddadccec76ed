"""A stand-in task that fails on purpose (no TensorFlow), for the restart tests.

FLAKY_PLAN is JSON: role ("worker:1", else "worker") -> a list of behaviours, one per start
(the last one repeats): "forever", "exit N after T", "kill SIG after T" (the task kills
itself), "error after T" (a Python traceback), "transient after T" (a TF error caused by a
peer), "spawn then forever" (leaves a child in its process group), "daemon then forever"
(leaves a child in a session of its own, its pid in $FLAKY_DIR/<type>-<index>.daemon),
"bind-taken" (holds the port of the task named by FLAKY_STEAL, then runs forever; "bind
after T" binds its own port like a TF server, or fails with "Address already in use";
"bind after-steal" first waits until the port was taken), "exit 0 once worker:1 started 3"
(waits for that; "worker:0,worker:1" waits for both). Each start appends a line to
$FLAKY_DIR/<type>-<index>.starts. A ps answers the launcher's gRPC probe
(tests/fake_tf_server.py) from its start, except in "bind" mode.
"""

import json
import os
import signal
import socket
import subprocess
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))
from fake_tf_server import serve_get_status  # noqa: E402

config = json.loads(os.environ["TF_CONFIG"])
kind, index = config["task"]["type"], config["task"]["index"]
name = f"{kind}:{index}"
plan = json.loads(os.environ.get("FLAKY_PLAN", "{}"))
steps = plan.get(name, plan.get(kind, ["exit 0 after 0.5"]))
record = os.path.join(os.environ["FLAKY_DIR"], f"{kind}-{index}.starts")
with open(record, "a") as f:
    f.write(f"{os.getpid()}\n")
with open(record) as f:
    start = len(f.read().splitlines()) - 1
words = steps[min(start, len(steps) - 1)].split()
print(f"{name} start {start}: {' '.join(words)}", flush=True)
# A ps answers the launcher's gRPC probe as TensorFlow's does (unless it binds its own port
# on purpose below).
server = serve_get_status(config) if kind == "ps" and words[0] != "bind" else None


def address(task_name: str) -> tuple[str, int]:
    t, i = task_name.split(":")
    members = config["cluster"].get(t) or []
    host, port = members[int(i)].rsplit(":", 1)
    return host, int(port)


def wait_for(predicate, timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while not predicate() and time.monotonic() < deadline:
        time.sleep(0.05)


def starts_of(task_name: str) -> int:
    path = os.path.join(os.environ["FLAKY_DIR"], task_name.replace(":", "-") + ".starts")
    return len(open(path).read().split()) if os.path.exists(path) else 0


STOLEN = os.path.join(os.environ["FLAKY_DIR"], "port-stolen")

if words[0] == "exit" and words[2] == "once":
    wait_for(lambda: all(starts_of(t) >= int(words[5]) for t in words[3].split(",")))
    time.sleep(0.5)
    sys.exit(int(words[1]))
if words[0] == "exit":
    time.sleep(float(words[3]))
    sys.exit(int(words[1]))
if words[0] == "kill":
    time.sleep(float(words[3]))
    os.kill(os.getpid(), getattr(signal, f"SIG{words[1]}"))
    time.sleep(5)
if words[0] == "error":
    time.sleep(float(words[2]))
    raise ValueError(f"{name}: a bug in the training script")
if words[0] == "transient":
    time.sleep(float(words[2]))
    print("tensorflow.python.framework.errors_impl.UnavailableError: Socket closed", flush=True)
    sys.exit(1)
if words[0] == "spawn":
    subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"])
if words[0] == "daemon":
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"],
                             start_new_session=True)
    with open(record.replace(".starts", ".daemon"), "a") as f:
        f.write(f"{child.pid}\n")
held = []
if words[0] in ("bind", "bind-taken"):
    target = os.environ["FLAKY_STEAL"] if words[0] == "bind-taken" else name
    if words[-1] == "after-steal":
        wait_for(lambda: os.path.exists(STOLEN))
    else:
        time.sleep(float(words[2]) if len(words) > 2 else 0)
    s = socket.socket()
    try:
        s.bind(("", address(target)[1]))
    except OSError as e:
        print(f"E0000 server.cc] bind: {e.strerror} ({e})", flush=True)
        sys.exit(1)
    s.listen()
    held.append(s)
    if words[0] == "bind-taken":
        open(STOLEN, "w").close()
    print(f"{name} listening on {address(target)[1]}", flush=True)
while True:  # like a ps blocked in server.join()
    time.sleep(0.2)
