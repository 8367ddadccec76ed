"""Is anything still being written into model_dir? Once training is done, the end rules
(launcher/ending.py) wait for trainers that still write there (a final save, a SavedModel
export) instead of stopping them in the middle of it.

``WriteWatch.look`` lists model_dir (recursively, one listing: on S3 one paged LIST) and
compares every file's size and modification time with the previous look; a difference is a
write. What the launcher's other writers put there does not count: the evaluator's
``eval*/`` directories, the metrics file, the launcher's own lease (its heartbeat), and
the trainers' events files (``events.out.tfevents.*``): a trainer appends its summaries
there while it trains, and training is not a save (docs/ending.md).
"""

from __future__ import annotations

from typing import Any

from orchestrator.metrics_file import METRICS_FILE
from orchestrator.tfformats import EVENTS_PREFIX

NOT_THE_TRAINERS = (METRICS_FILE,)       # files other writers keep changing
OTHER_PREFIXES = (".tfcluster", "eval")  # the launcher's own files, the evaluator's dirs


class WriteWatch:
    """Looks at model_dir's files; ``look`` says whether one changed since the last look."""

    def __init__(self, fs: Any, root: str):
        self.fs = fs
        self.root = root.rstrip("/") or "/"
        self._seen: dict[str, tuple] | None = None

    def look(self) -> str | None:
        """The file (relative to model_dir) that changed since the last look, the newest
        such when several did; None when nothing changed (and at the first look, which
        only takes stock)."""
        files = self._files()
        before, self._seen = self._seen, files
        if before is None:
            return None
        changed = [name for name, sig in files.items() if before.get(name) != sig]
        changed += [name for name in before if name not in files]        # removed
        if not changed:
            return None
        return max(changed, key=lambda n: _number(files.get(n, (0, 0))[1]))

    def _files(self) -> dict[str, tuple]:
        found = self.fs.find(self.root, detail=True)
        out = {}
        for path, info in found.items():
            name = path[len(self.root):].lstrip("/") if path.startswith(self.root) else path
            if name in NOT_THE_TRAINERS or name.split("/", 1)[0].startswith(OTHER_PREFIXES) \
                    or name.rsplit("/", 1)[-1].startswith(EVENTS_PREFIX):
                continue
            stamp = info.get("mtime", info.get("LastModified", info.get("ETag")))
            out[name] = (info.get("size"), stamp)
        return out


def _number(stamp: Any) -> float:
    """A modification time to compare (a datetime on S3, seconds elsewhere)."""
    if hasattr(stamp, "timestamp"):
        return float(stamp.timestamp())
    try:
        return float(stamp)
    except (TypeError, ValueError):
        return 0.0
