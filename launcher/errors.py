"""Errors the CLI turns into one clear message and an exit status (``exit_of``: the one
map from an exception to the launcher's exit status)."""

from __future__ import annotations

import signal


class UsageError(Exception):
    """Bad input (spec, command line, environment): exit status 2, nothing started."""

    exit_status = 2


class SpecError(UsageError):
    """A problem with one field of the cluster spec."""

    def __init__(self, field: str, message: str, source: str | None = None):
        self.field = field
        self.message = message
        self.source = source
        where = f"{source}: " if source else ""
        super().__init__(f"{where}{field}: {message}" if field else f"{where}{message}")


class PreflightError(UsageError):
    """Checks before start failed (hosts unreachable, storage not shared...)."""


class LauncherFailed(Exception):
    """The launcher's own failure (a bug, not the job's): the message is the one line to
    show (launcher/records/crash.py), the full traceback is saved to a file."""


class Terminated(Exception):
    """SIGTERM or SIGHUP before the job loop took over the signals (checks, probes);
    ``args[0]`` is the signal number."""


def exit_of(e: BaseException) -> tuple[int, str]:
    """The launcher's exit status when ``e`` ended it, and why in one line: bad input 2,
    Ctrl-C 130, signal N 128+N, a failure 1 (``own_failure``: the launcher's bug)."""
    if isinstance(e, UsageError):
        return e.exit_status, str(e)
    if isinstance(e, KeyboardInterrupt):
        return 130, "interrupted by SIGINT"
    if isinstance(e, Terminated):
        return 128 + e.args[0], f"interrupted by {signal.Signals(e.args[0]).name}"
    if isinstance(e, LauncherFailed):
        return 1, str(e)
    return 1, f"launcher error: {e!r}"


def own_failure(e: BaseException) -> bool:
    """``e`` is the launcher's own bug (no end ``exit_of`` names): its traceback is kept."""
    return not isinstance(e, (UsageError, KeyboardInterrupt, Terminated, LauncherFailed))
