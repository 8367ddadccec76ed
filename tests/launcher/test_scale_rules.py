"""The job loop's rules while hundreds of tasks start off its thread (launcher/tasks.py,
``Backend.start_threads``): a task that fails while others still start is seen at once,
and Ctrl-C during a long start stops everything in order. The scripted backend here starts
tasks in two threads and slowly, on the real clock."""

from __future__ import annotations

import json
import os
import signal
import time

import pytest
from scripted_backend import Script, ScriptedBackend, run_job

pytestmark = pytest.mark.usefixtures("scripted_backend")

WORKERS = 300
SLOW_AFTER = 10          # starts after these many take START_SECS each
START_SECS = 0.1         # 290 slow starts in 2 threads: 14.5 s if nothing cut them short


class RealClock:
    """The job loop's clock and wait on real time: starts run in other threads."""

    def __call__(self) -> float:
        return time.monotonic()

    def sleep(self, seconds: float) -> None:
        time.sleep(seconds)


class SlowStarts(ScriptedBackend):
    """A scripted backend whose starts take time, in two threads off the loop's."""

    start_threads = 2

    def __init__(self, scripts, on_start=None):
        super().__init__(scripts)
        self.clock = RealClock()
        self.on_start = on_start

    def start(self, task):
        if len(self.starts) >= SLOW_AFTER:
            time.sleep(START_SECS)
        handle = super().start(task)
        if self.on_start is not None:
            self.on_start(len(self.starts))
        return handle


def stopping_events(tmp_path) -> list[list[str]]:
    with open(tmp_path / "run" / "events.jsonl") as f:
        events = [json.loads(line) for line in f]
    return [e["tasks"] for e in events if e["event"] == "stopping"]


def test_a_task_failing_while_others_still_start_is_seen_at_once(tmp_path):
    scripts = {"worker:3": [Script(exit_at=0, status=1, lines=["ValueError: bad data"])]}
    backend = SlowStarts(scripts)
    result, out = run_job({"cluster": {"chief": 1, "worker": WORKERS, "ps": 2}}, backend,
                          tmp_path)
    assert result.status == 1 and result.reason.startswith("worker:3 failed")
    started = len(backend.starts)
    assert started < WORKERS // 2           # the rest were never started
    handles = [h for hs in backend.handles.values() for h in hs]
    assert len(handles) == started and all(h.poll() is not None for h in handles)
    assert "ValueError: bad data" in out.getvalue()


def test_ctrl_c_during_a_long_start_stops_everything_in_order(tmp_path):
    def ctrl_c_at_the_20th_start(count: int) -> None:
        if count == 20:
            os.kill(os.getpid(), signal.SIGINT)

    backend = SlowStarts({}, on_start=ctrl_c_at_the_20th_start)
    result, _ = run_job({"cluster": {"chief": 1, "worker": WORKERS, "ps": 2}}, backend,
                        tmp_path)
    assert result.status == 128 + signal.SIGINT
    assert result.reason == "interrupted by SIGINT"
    assert len(backend.starts) < 40         # at most the starts under way went on
    first, last = stopping_events(tmp_path)
    assert "ps:0" not in first and "chief:0" in first and len(first) == len(
        backend.starts) - 2
    assert last == ["ps:0", "ps:1"]         # the ps last, once the others are gone
    handles = [h for hs in backend.handles.values() for h in hs]
    assert all(h.signals == [signal.SIGTERM] for h in handles)
