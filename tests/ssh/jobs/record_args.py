"""A task that records what it received (argv, one environment variable, host name) as JSON
in OUT_DIR/<task>.json, then exits 0. Usage: record_args.py OUT_DIR ARG..."""

import json
import os
import socket
import sys

out_dir = sys.argv[1]
task = os.environ["TFCLUSTER_TASK"].replace(":", "-")
record = {"argv": sys.argv[2:], "tricky": os.environ.get("TRICKY"), "cwd": os.getcwd(),
          "host": socket.gethostname()}
with open(os.path.join(out_dir, f"{task}.json"), "w", encoding="utf-8") as f:
    json.dump(record, f)
print(f"recorded {len(sys.argv) - 2} arguments on {record['host']}", flush=True)
