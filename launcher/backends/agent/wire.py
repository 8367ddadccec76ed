"""The agent's one frame format, the same over ssh and in a Slurm node step.

Every word from the agent on its stdout is a frame: a header line ``NONCE KIND KEY LEN``,
LEN bytes, and a newline (srun passes on whole lines). NONCE is the launcher's, so a line
that is not the agent's (a login script's echo) is told apart. Kinds:

- ``out``: output of task KEY (its stdout and stderr); LEN 0: its output ended;
- ``status``: JSON about task KEY: ``{"started": PID}``, then ``{"exit": STATUS}``
  (negative: the signal that killed it; with ``"refused"``: the line saying why its
  command never ran), always after the end of its output;
- ``answer``: JSON, the answer to question KEY (a check or a probe);
- ``alive``: the answer to a sign of life (KEY ``-``, no bytes).

The launcher's side reads them in launcher/backends/agent/reader.py (``read_frames``).

Plain standard library, Python 3.6+ (part of the agent's joined source).
"""

import json
import sys
import threading

_OUT = threading.Lock()
WHO = ["tfcluster-bootstrap"]   # how the agent signs its own lines in a task's output


def emit(data):
    """Bytes for the launcher, on stdout, whole (frames of several tasks never mix)."""
    with _OUT:
        try:
            sys.stdout.buffer.write(data)
            sys.stdout.buffer.flush()
        except (OSError, ValueError):
            pass


def send_frame(nonce, kind, key, data=b""):
    """One frame: ``NONCE KIND KEY LEN``, LEN bytes, a newline."""
    emit((nonce + " " + kind + " " + str(key) + " " + str(len(data)) + "\n").encode() +
         data + b"\n")


def send_json(nonce, kind, key, fields):
    send_frame(nonce, kind, key, json.dumps(fields).encode())


def say(nonce, task_id, text):
    """A line in a task's output, from the agent itself."""
    send_frame(nonce, "out", task_id, (WHO[0] + ": " + text + "\n").encode())
