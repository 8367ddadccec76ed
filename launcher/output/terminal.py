"""Which console a run gets: the live view (launcher/output/live.py) when both stdout and
stderr are a terminal, else plain lines (launcher/output/console.py)."""

from __future__ import annotations

import os
import sys
from typing import IO

from launcher.output.console import Console


def make_console(quiet: bool = False, verbose: bool = False) -> Console:
    """The live view when both stdout and stderr are a terminal (and rich is installed),
    else plain lines."""
    if not quiet and _terminal(sys.stdout) and _terminal(sys.stderr) and \
            os.environ.get("TERM", "") != "dumb":
        try:
            from launcher.output.live import LiveConsole

            return LiveConsole(verbose=verbose)
        except ImportError:
            pass        # rich is a dependency; an environment without it prints lines
    return Console(quiet=quiet, verbose=verbose)


def _terminal(stream: IO[str]) -> bool:
    try:
        return stream.isatty()
    except (AttributeError, ValueError):
        return False
