"""Errors the CLI turns into one clear message and an exit status."""

from __future__ import annotations


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
