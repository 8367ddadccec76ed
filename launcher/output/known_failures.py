"""Known TensorFlow and Keras failures, named with their fix: plain data (a signature, the
cause in one line, the fix in one line) and one function that matches a failed task's end
against it. The console prints the two lines under the task's exception, summary.json and
``launch status --json`` keep them as ``known_failure`` (docs/keras.md, docs/console.md).

A signature is a set of words that must all be in the task's exception (its whole
message, however many lines the message takes: a tensor dump) or in its last lines, and,
for a kill, the signal. Each was taken from the real failure (tests/keras/).
"""

from __future__ import annotations

import signal
from collections.abc import Sequence
from dataclasses import dataclass

from launcher.output.tracebacks import TRACEBACK, read_log_end

TEXT_LINES = 400        # last lines of a log matched against the signatures


@dataclass(frozen=True)
class KnownFailure:
    """One failure TensorFlow or Keras is known to end a task with, and its way out."""

    name: str
    cause: str
    fix: str
    words: tuple[tuple[str, ...], ...]   # any of these groups, each group's words all found
    killed: bool = False                 # only a task killed by SIGKILL (the kernel's OOM)

    def to_dict(self, task: str) -> dict[str, str]:
        return {"name": self.name, "task": task, "cause": self.cause, "fix": self.fix}


CATALOGUE: tuple[KnownFailure, ...] = (
    KnownFailure(
        "keras3-distributed",
        "Keras 3 (tf.keras on TensorFlow >= 2.16) cannot run Model.fit under "
        "MultiWorkerMirroredStrategy or ParameterServerStrategy (keras-team/keras#20585)",
        'set "keras": "tf-keras" in the spec (Keras 2: TF_USE_LEGACY_KERAS=1; pip install '
        '--no-deps tf-keras==<TensorFlow\'s version> where the tasks run), or run Keras 3 '
        'on JAX with "keras": "jax" (docs/keras.md)',
        (("PerReplica", "with an unsupported type", "to a Tensor"),
         ("ClusterCoordinator.create_per_worker_dataset", "keras"))),
    KnownFailure(
        "tf-estimator-missing",
        "tf.estimator is gone from TensorFlow 2.16 on: this interpreter's TensorFlow has no "
        "Estimator",
        "run Estimator scripts with TensorFlow 2.15 (pip install tensorflow-cpu==2.15.1 "
        "brings tensorflow-estimator), or port the script to Keras with "
        '"keras": "tf-keras" (docs/keras.md)',
        (("module 'tensorflow' has no attribute 'estimator'",),
         ("No module named 'tensorflow_estimator'",),
         ("No module named 'tensorflow.estimator'",))),
    KnownFailure(
        "rungraph-twice",
        "TensorFlow 2.15's distributed session retried a step a task had already received "
        "(a worker or ps was restarted in the middle of a step) and loops on it",
        "start the whole cluster again from the newest checkpoint: launch the spec again "
        "(a lost ps restarts the cluster by default; restart.worker: \"never\" stops the "
        "job at once instead of letting it loop)",
        (("The same RunGraph request was received twice",),)),
    KnownFailure(
        "grpc-unreachable",
        "a task could not reach a peer's TensorFlow server over gRPC (the peer ended, had "
        "not started yet, or its host:port cannot be reached from here)",
        "check the peer's own error above; across hosts, check that each host reaches the "
        "others' ports (`launch SPEC --dry-run` lists every address)",
        (("failed to connect to all addresses",),)),
    KnownFailure(
        "gloo-hostname",
        "JAX's CPU collectives (Gloo) could not resolve this host's own name to an address",
        "make each host's name (`hostname`) resolve there, through /etc/hosts or DNS "
        "(docs/keras.md)",
        (("gloo/transport/tcp/device.cc", "rv == 0"),)),
    KnownFailure(
        "oom-kill",
        "the task ran out of memory and was killed (SIGKILL from the kernel's OOM killer "
        "or the engine's memory limit)",
        "give the role more memory (resources.<role>.memory on Slurm, Kubernetes, docker), "
        "fewer tasks per host, or a smaller batch_size or model",
        (("oom-kill",), ("oom_kill",), ("Out of memory",), ("OOMKilled",),
         ("out of memory: Killed process",)),
        killed=True),
)


def match(text: str, status: int | None) -> KnownFailure | None:
    """The first known failure whose signature is in ``text`` (and, for a kill, whose
    signal ``status`` is), or None."""
    killed = status in (-signal.SIGKILL, 128 + signal.SIGKILL)
    for known in CATALOGUE:
        if known.killed and not killed:
            continue
        if any(all(word in text for word in group) for group in known.words):
            return known
    return None


def kernel_oom(pid: int | None, lines: Sequence[str]) -> bool:
    """Whether the kernel's log lines say it killed ``pid`` for memory."""
    if pid is None:
        return False
    mark = f"Killed process {pid} "
    return any(mark in line and "memory" in line.lower() for line in lines)


def kernel_log() -> list[str]:
    """The kernel's recent messages as this machine keeps them (/dev/kmsg, read without
    waiting; [] where it cannot be read: not root, a container)."""
    import os

    try:
        fd = os.open("/dev/kmsg", os.O_RDONLY | os.O_NONBLOCK)
    except OSError:
        return []
    lines = []
    try:
        while True:
            try:
                record = os.read(fd, 8192)
            except BlockingIOError:
                break
            except OSError:     # a record overwritten while read: go on with the next
                continue
            if not record:
                break
            lines.append(record.decode("utf-8", "replace").split(";", 1)[-1].strip())
    finally:
        os.close(fd)
    return lines


def diagnose(log_path: str, status: int | None, pid: int | None = None
             ) -> KnownFailure | None:
    """The known failure a failed task's log (and, for a SIGKILL of a task of this
    machine, the kernel's log) shows, or None."""
    lines, _ = read_log_end(log_path, 1 << 20)
    text = "\n".join(lines[-TEXT_LINES:])
    start = max((i for i, line in enumerate(lines) if line.strip().endswith(TRACEBACK)),
                default=None)
    if start is not None and start < len(lines) - TEXT_LINES:
        text = "\n".join(lines[start:start + TEXT_LINES]) + "\n" + text
    found = match(text, status)
    if found is None and status in (-signal.SIGKILL, 128 + signal.SIGKILL) and \
            kernel_oom(pid, kernel_log()):
        found = next(k for k in CATALOGUE if k.name == "oom-kill")
    return found


def lines_of(known: KnownFailure) -> list[str]:
    """The two console lines of a known failure."""
    return [f"  cause: {known.cause}", f"  fix: {known.fix}"]


def known_of(tasks: Sequence) -> dict[str, str] | None:
    """The known failure of the first task that failed by itself (TaskState snapshots),
    as summary.json and ``launch status --json`` keep it."""
    def first(task) -> float:
        return task.ended_at if task.ended_at is not None else float("inf")

    for task in sorted(tasks, key=first):     # the first to fail is the story
        if task.status in (None, 0) or task.stopped or not task.log:
            continue
        found = diagnose(task.log, task.status, task.pid)
        if found is not None:
            return found.to_dict(task.name)
    return None
