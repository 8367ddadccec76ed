"""The agent's entry points: ``main`` for an ssh session (the source ends with it), and
``serve`` for a Slurm node step. Both read one message a line on stdin:

1. ``{"nonce", "ask": Q, "check": [...], "gpu_query", "sync" | "install"}``: the host
   check (and the workdir's copy first), and ``{"nonce", "ask": Q, "probe": {"argv", "env",
   "cwd", "timeout"}}``, a short command run beside the rest; each answered by one
   ``answer`` frame (launcher/backends/agent/wire.py);
2. ``{"nonce", "run": ID, "task", "argv", "env", "cwd", "grace", "silence", "host"}``
   starts a task (no answer awaited: one round trip for all of a host's tasks);
3. control lines: ``ID SIGNAL`` sends a signal to task ID's process group; ``0`` is a sign
   of life, answered by an ``alive`` frame.

End of stdin (the launcher closed it, died, or the connection dropped), or no line at all
for ``silence`` seconds (the host is cut off from the launcher: the launcher has given its
tasks up by then), terminates every task's group, then kills them after ``grace`` seconds.

Plain standard library, Python 3.6+ (part of the agent's joined source).
"""

import json
import os
import socket
import sys
import threading
import time

from launcher.backends.agent.probes import check, run_probe
from launcher.backends.agent.sync_store import drop_scratch, os_problem, sync_install, sync_state
from launcher.backends.agent.tasks import Tasks, watch_silence
from launcher.backends.agent.wire import WHO, send_frame, send_json

# ssh: the remote shell runs ``PYTHON -I -S -c SSH_STUB``; its first line is the source
SSH_STUB = "import sys,json;exec(json.loads(sys.stdin.readline()))"
# a Slurm node step: the first line is read a byte at a time, the rest stays for serve()
NODE_STUB = ('import os,sys,json;g={"__name__":"tfcluster_node"};exec(json.loads(b"".join('
             'iter(lambda:os.read(0,1) or sys.exit(3),b"\\n"))),g);g["serve"]()')


def checked(desc):
    """A check message: first the workdir's copy when it carries ``sync`` (is the tree here:
    ``sync_state``) or ``install`` (``sync_install``), then ``check`` in that copy. A
    copy not complete yet is answered without a check: what is missing, or the problem."""
    synced = found = None
    if "sync" in desc or "install" in desc:
        try:
            found = sync_install(desc["install"]) if "install" in desc else \
                sync_state(desc["sync"])
        except OSError as e:
            found = {"problem": os_problem(e)}
        if not found.get("root"):
            send_json(desc["nonce"], "answer", desc["ask"],
                      {"host": socket.gethostname(), "problems": [], "sync": found})
            return
        synced = found["root"]
    send_json(desc["nonce"], "answer", desc["ask"],
              check(desc["check"], desc.get("gpu_query"), synced, found))


def probed(desc):
    """A probe message, answered with the command's status and output (its last 64 KiB)."""
    asked = desc["probe"]
    status, output = run_probe(asked["argv"], asked.get("env") or {}, asked.get("cwd") or None,
                               asked.get("timeout", 60))
    send_json(desc["nonce"], "answer", desc["ask"],
              {"status": status, "output": output[-65536:]})


def main():
    tasks = Tasks()
    last = [time.monotonic()]
    watchdog = None
    while True:
        line = sys.stdin.readline()
        if not line:
            break           # end of stdin: the launcher closed it, died, or is cut off
        last[0] = time.monotonic()
        line = line.strip()
        if line.startswith("{"):
            desc = json.loads(line)
            if "check" in desc:
                checked(desc)
            elif "probe" in desc:      # beside the others: signals wait for none
                prober = threading.Thread(target=probed, args=(desc,))
                prober.daemon = True
                prober.start()
            elif "run" in desc:
                tasks.start(desc)
                if watchdog is None:
                    watchdog = threading.Thread(target=watch_silence,
                                                args=(tasks, last, lambda: finish(0)))
                    watchdog.daemon = True
                    watchdog.start()
        elif line == "0":
            if tasks.nonce:
                send_frame(tasks.nonce, "alive", "-")
        elif line:
            task_id, _, sig = line.partition(" ")
            try:
                tasks.signal(task_id, int(sig))
            except ValueError:
                continue
    tasks.end_all()
    return 0


def serve():
    """A Slurm node step's agent (NODE_STUB calls it): its lines are signed
    ``tfcluster-node``."""
    WHO[0] = "tfcluster-node"
    finish(main())


def finish(code):
    drop_scratch()
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):
            pass
    os._exit(code)  # not sys.exit: a relay thread may still hold a lock


if __name__ == "__main__":
    finish(main())
