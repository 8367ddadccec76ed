"""Runs on a Slurm node as one job step, sent there by the slurm backend: starts, signals
and reaps every task of the job on that node, so that slurmctld sees one step per node
instead of one per task (docs/slurm.md, "Steps").

Plain standard library, Python 3.6+. The backend runs ``PYTHON -I -S -c STUB`` (``STUB``
below) as ``srun --overlap`` on the node and writes to its stdin: first the source of
launcher/backends/remote_bootstrap.py and of this file, as one JSON string (its helpers word
a refused start as the ssh backend does), then JSON messages, one a line:

- ``{"start": KEY, "argv": [...], "env": {...}, "cwd": DIR, "host": H}`` starts a task
  (KEY names one start of one task: ``worker:3#2``; H words a refused start), in a process
  group of its own, with this step's environment (Slurm's step variables included) plus
  ``env``;
- ``{"signal": KEY, "sig": N}`` sends signal N to that task's process group.

stdout carries frames, each a header line ``KIND KEY LENGTH``, LENGTH bytes and a newline
(srun passes on whole lines): ``o`` is
output of the task (stdout and stderr), ``x`` its end, ``{"exit": STATUS}`` (negative: the
signal that killed it; ``"refused"``: the one line saying why its command never ran). A
task's end comes after the last of its output. When a task's first process ends, whatever
is left of its group is killed. End of stdin (the launcher closed it or died) terminates
every group, then kills them after ``GRACE`` seconds; the step ends once they all ended.
"""

import json
import os
import selectors
import signal
import socket
import sys
import time

# reads its first line a byte at a time: what follows it stays unread, for serve()
STUB = ('import os,sys,json;g={"__name__":"tfcluster_node"};exec(json.loads(b"".join('
        'iter(lambda:os.read(0,1) or sys.exit(3),b"\\n"))),g);g["serve"]()')
GRACE = 10.0
CHUNK = 65536

# On a node, remote_bootstrap's source ran first in the same namespace: no name here may
# be one of its own (its functions would call ours).
try:
    killpg  # noqa: B018
except NameError:
    from launcher.backends.remote_bootstrap import (
        killpg,
        refused_status,
        spawn,
        start_failure_line,
    )


class Task:
    """One start of one task on this node."""

    def __init__(self, key, proc):
        self.key = key
        self.proc = proc
        self.status = None      # its exit status once its first process ended
        self.eof = False        # its output ended


def send_frame(out, kind, key, data):
    out.write(f"{kind} {key} {len(data)}\n".encode() + data + b"\n")
    out.flush()


def start(out, tasks, sel, desc):
    key, argv = desc["start"], desc["argv"]
    env, cwd = desc.get("env") or {}, desc.get("cwd") or None
    try:
        proc = spawn(argv, env, cwd)
    except OSError as e:
        line = start_failure_line(key.split("#")[0], argv, e, cwd,
                                  env.get("PATH", os.environ.get("PATH")),
                                  desc.get("host") or socket.gethostname())
        send_frame(out, "o", key, ("tfcluster-node: " + line + "\n").encode())
        send_frame(out, "x", key, json.dumps({"exit": refused_status(e), "refused": line}).encode())
        return
    task = Task(key, proc)
    tasks[key] = task
    stdout = proc.stdout
    assert stdout is not None
    os.set_blocking(stdout.fileno(), False)
    sel.register(stdout, selectors.EVENT_READ, task)


def command(out, tasks, sel, line):
    try:
        desc = json.loads(line)
    except ValueError:
        return
    if "start" in desc:
        start(out, tasks, sel, desc)
    elif "signal" in desc:
        task = tasks.get(desc["signal"])
        if task is not None and task.status is None:
            killpg(task.proc.pid, int(desc["sig"]))


def read_output(out, sel, task):
    try:
        data = os.read(task.proc.stdout.fileno(), CHUNK)
    except BlockingIOError:
        return
    except OSError:
        data = b""
    if data:
        send_frame(out, "o", task.key, data)
        return
    sel.unregister(task.proc.stdout)
    task.proc.stdout.close()
    task.eof = True


def reap(out, tasks):
    for task in list(tasks.values()):
        if task.status is None:
            task.status = task.proc.poll()
            if task.status is not None:
                killpg(task.proc.pid, signal.SIGKILL)   # what is left of its group
        if task.status is not None and task.eof:
            send_frame(out, "x", task.key, json.dumps({"exit": task.status}).encode())
            del tasks[task.key]


def signal_all(tasks, sig):
    for task in tasks.values():
        killpg(task.proc.pid, sig)


def serve():
    out = sys.stdout.buffer
    tasks = {}  # type: dict[str, Task]
    sel = selectors.DefaultSelector()
    os.set_blocking(0, False)
    sel.register(0, selectors.EVENT_READ, None)
    pending = b""
    ending_at = None     # the launcher is gone: tasks get SIGTERM, and SIGKILL at this time
    try:
        while ending_at is None or tasks:
            for key, _ in sel.select(0.2):
                if key.data is not None:
                    read_output(out, sel, key.data)
                    continue
                try:
                    data = os.read(0, CHUNK)
                except BlockingIOError:
                    continue
                if not data:
                    sel.unregister(0)
                    ending_at = time.monotonic() + GRACE
                    signal_all(tasks, signal.SIGTERM)
                pending += data
                *lines, pending = pending.split(b"\n")
                for line in lines:
                    command(out, tasks, sel, line)
            reap(out, tasks)
            if ending_at is not None and time.monotonic() > ending_at:
                signal_all(tasks, signal.SIGKILL)
    except (OSError, KeyboardInterrupt):     # stdout is gone: no launcher to tell
        signal_all(tasks, signal.SIGKILL)
    os._exit(0)
