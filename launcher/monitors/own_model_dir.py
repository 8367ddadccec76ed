"""A script that writes somewhere else than the spec's model_dir (TensorFlow's multi-worker
Estimator tutorial hard-codes ``model_dir='/tmp/multiworker'``): where it writes, from the
task's own words (its Estimator's ``Using config`` record, read by launcher/output/
trainer_steps.py) or, for a task on this machine, from the TensorFlow files it holds open
(an events file, a checkpoint), so that one line can name it."""

from __future__ import annotations

import os

TF_FILES = ("events.out.tfevents", "checkpoint", "graph.pbtxt")
MARK = b"\0TFCLUSTER_MODEL_DIR="        # a task process of this launcher's, not an ssh client


def open_tf_file(pid: int | None) -> str | None:
    """A TensorFlow file (events file, checkpoint) the local process ``pid`` holds open;
    None when there is none or the process is not a task of this machine."""
    if pid is None:
        return None
    try:
        with open(f"/proc/{pid}/environ", "rb") as f:
            if MARK not in b"\0" + f.read():
                return None
        fds = os.listdir(f"/proc/{pid}/fd")
    except OSError:
        return None
    for fd in fds:
        try:
            path = os.readlink(f"/proc/{pid}/fd/{fd}")
        except OSError:
            continue
        name = os.path.basename(path)
        if name.startswith(TF_FILES) or ".ckpt" in name:
            return path
    return None


def outside(path: str, model_dir: str) -> bool:
    """Whether the local ``path`` is outside the local ``model_dir`` (a URL model_dir
    (s3://...) is never compared: a local file is outside it by definition)."""
    if "://" in model_dir and not model_dir.startswith("file://"):
        return True
    root = os.path.realpath(model_dir.removeprefix("file://"))
    return os.path.commonpath([os.path.realpath(path), root]) != root


def elsewhere_line(task: str, where: str, how: str, model_dir: str) -> str:
    """The one line that names it."""
    return (f"{task} writes into {where}, not into the spec's model_dir {model_dir} "
            f"({how}): the script sets its own model_dir; the launcher follows no "
            f"checkpoint, step or evaluation there")
