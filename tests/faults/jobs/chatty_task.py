"""A stand-in task (no TensorFlow) that prints CHATTY_LINES lines of 60 bytes as fast as
it can, then exits 0. With CHATTY_REMOVE set (worker:0 only), it first removes that folder:
the run directory, mid-run. The launcher may create a file in it while it is being removed
(a task's log on its first line, plan.json), so it removes until the folder is gone, as a
user's second `rm -rf` would."""

import os
import shutil

if os.environ.get("CHATTY_REMOVE") and os.environ["TFCLUSTER_TASK_TYPE"] == "worker":
    for _ in range(100):
        shutil.rmtree(os.environ["CHATTY_REMOVE"], ignore_errors=True)
        if not os.path.exists(os.environ["CHATTY_REMOVE"]):
            break
    print("removed the run directory", flush=True)
name = f"{os.environ['TFCLUSTER_TASK_TYPE']}:{os.environ['TFCLUSTER_TASK_INDEX']}"
for i in range(int(os.environ.get("CHATTY_LINES", "20000"))):
    print(f"{name} line {i:06d} " + "x" * (44 - len(name)))
