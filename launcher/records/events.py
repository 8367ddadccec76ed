"""The run directory's machine-readable event log: one JSON object per line."""

from __future__ import annotations

import json
import threading
import time
from typing import Callable


class EventLog:
    """Appends events; a write that fails (a full disk, the run directory removed) never
    raises: ``on_error`` is told (the job loop says it once and goes on)."""

    def __init__(self, path: str | None, on_error: Callable[[OSError], None] | None = None):
        self.path = path
        self.on_error = on_error
        self._lock = threading.Lock()

    def write(self, event: str, **fields) -> None:
        if self.path is None:
            return
        record = {"time": round(time.time(), 3), "event": event, **fields}
        line = json.dumps(record, default=str)
        try:
            with self._lock, open(self.path, "a", encoding="utf-8") as f:
                f.write(line + "\n")
        except OSError as e:
            if self.on_error is not None:
                self.on_error(e)

