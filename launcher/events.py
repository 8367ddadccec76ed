"""The run directory's machine-readable event log: one JSON object per line."""

from __future__ import annotations

import json
import threading
import time


class EventLog:
    def __init__(self, path: str | None):
        self.path = path
        self._lock = threading.Lock()

    def write(self, event: str, **fields) -> None:
        if self.path is None:
            return
        record = {"time": round(time.time(), 3), "event": event, **fields}
        line = json.dumps(record, default=str)
        with self._lock, open(self.path, "a", encoding="utf-8") as f:
            f.write(line + "\n")


def read_events(path: str) -> list[dict]:
    with open(path, encoding="utf-8") as f:
        return [json.loads(line) for line in f if line.strip()]
