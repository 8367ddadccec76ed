"""A stand-in for TensorBoard (no TensorFlow): says it serves as TensorBoard 2.x does, with a
child process in its group, and runs until stopped; FAKE_TB=crash: fails at once."""

import os
import subprocess
import sys
import time

port = sys.argv[sys.argv.index("--port") + 1]
if os.environ.get("FAKE_TB") == "crash":
    print("E1202 07:00:00.000000 1 program.py:300] error: could not bind to port " + port,
          flush=True)
    sys.exit(3)
child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"])
print(f"child {child.pid}", flush=True)
print(f"TensorBoard 2.15.2 at http://localhost:{port}/ (Press CTRL+C to quit)", flush=True)
while True:
    time.sleep(1)
