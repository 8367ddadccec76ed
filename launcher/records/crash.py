"""The launcher's own failure (a bug in tfcluster, not in the job): its full traceback is
saved to a file and the user gets one line that says whose fault it is and where that file
is. No launcher code path ends in a traceback on the console."""

from __future__ import annotations

import os

ERROR_FILE = "launcher-error.txt"


def save_traceback(error: BaseException, run_dir: str | None = None) -> str | None:
    """Write ``error``'s traceback to ``run_dir``/launcher-error.txt, else (no run_dir, or
    it cannot be written: a full disk) to a new file in the temporary folder. Its path, or
    None when nothing could be written."""
    import tempfile  # here: not on a launch's way to its tasks
    import traceback

    text = "".join(traceback.format_exception(type(error), error, error.__traceback__))
    if run_dir:
        path = os.path.join(run_dir, ERROR_FILE)
        try:
            with open(path, "a", encoding="utf-8") as f:
                f.write(text)
            return path
        except OSError:
            pass
    try:
        fd, path = tempfile.mkstemp(prefix="tfcluster-launcher-error-", suffix=".txt")
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(text)
        return path
    except OSError:
        return None


def crash_line(error: BaseException, saved: str | None) -> str:
    """One line: the launcher failed (its fault, not the job's), where, and the file with
    the whole traceback."""
    import traceback

    frames = traceback.extract_tb(error.__traceback__)
    where = f" at {os.path.basename(frames[-1].filename)}:{frames[-1].lineno}" if frames else ""
    what = f"{type(error).__name__}: {error}" if str(error) else type(error).__name__
    what = what.splitlines()[0] if what else type(error).__name__
    kept = f"; full traceback in {saved}" if saved else ""
    return (f"launcher error (a bug in tfcluster, not in the job): {what}{where}{kept}; "
            "please report it")
