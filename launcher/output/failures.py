"""How a failed task is shown: its exception and where its traceback starts, what the
launcher knows of the error, its last lines; folded to two lines when the launcher handled
its end (a restart, a tolerated exit); the words a lost port shows. The job loop
(launcher/job.py, launcher/loop/) says when; this module says what."""

from __future__ import annotations

from collections.abc import Iterable

from launcher.output.known_failures import diagnose, lines_of
from launcher.output.tracebacks import Excerpt, describe, tail_box

FOLDED_EXCEPTION = 240      # characters of a folded exception line
PORT_IN_USE = ("Address already in use", "Failed to add port", "bind: address")
# TensorFlow's words when the script's own model_dir is not the one in TF_CONFIG.
MODEL_DIR_MISMATCH = ("must have the same value as the model_dir in TF_CONFIG",
                      "are set both in constructor and `RunConfig`, but with different")


def excerpt_lines(name: str, log_path: str, excerpt: Excerpt, folded: bool = False
                  ) -> list[str]:
    """The exception of a failed task, where its traceback starts, and a hint for the
    errors the launcher can explain. ``folded``: a failure the launcher handled, whose
    traceback the console did not print (the exception line cut to FOLDED_EXCEPTION)."""
    where = f"traceback from line {excerpt.traceback_line} of {log_path}"
    if excerpt.raised_in:
        where += f", raised in {excerpt.raised_in}"
    exception = excerpt.exception
    if folded:
        where = f"not shown: {where}"
        if len(exception) > FOLDED_EXCEPTION:
            exception = exception[:FOLDED_EXCEPTION - 1] + "…"
    lines = [f"{name}: {exception}", f"  ({where})"]
    if any(m in excerpt.exception for m in MODEL_DIR_MISMATCH):
        lines.append("  the script gives TensorFlow a model_dir other than the spec's, which "
                     "TF_CONFIG carries for Estimator jobs: pass "
                     "os.environ['TFCLUSTER_MODEL_DIR'] (the very same string), or set "
                     "\"tf_config_model_dir\": false in the spec")
    return lines


def failure_lines(name: str, log_path: str, status: int | None, pid: int | None,
                  tail: list[str]) -> list[str]:
    """What follows the reason of a job failed by this task: its exception and where its
    traceback is, what the launcher knows of the error, its last lines boxed."""
    excerpt = describe(log_path)
    lines = excerpt_lines(name, log_path, excerpt) if excerpt is not None else []
    known = diagnose(log_path, status, pid)
    lines += lines_of(known) if known is not None else []
    if tail:
        lines.append(f"last lines of {name} ({log_path}):")
        lines += [f"  | {line}" for line in tail_box(tail, excerpt)]
    return lines


def folded_lines(name: str, log_path: str, why: str | None = None) -> list[str]:
    """A handled failure's traceback folded: ``why`` (when no line said it yet), then its
    exception and where its traceback is."""
    excerpt = describe(log_path)
    lines = [why] if why else []
    return lines + (excerpt_lines(name, log_path, excerpt, folded=True)[:2]
                    if excerpt is not None else [f"{name}: its traceback is in {log_path}"])


def with_exception(tail: Iterable[str], log_path: str) -> list[str]:
    """A failed task's last lines, with its exception (and its chain) when that is further
    up its log: what the restart policies classify."""
    lines = list(tail)
    excerpt = describe(log_path)
    if excerpt is not None:
        lines += excerpt.chain or (excerpt.exception,)
    return lines


def lost_its_port(tail: Iterable[str]) -> bool:
    """The task's last lines say its port was taken (a race with another process)."""
    return any(m in line for line in tail for m in PORT_IN_USE)
