"""The coordinator as the job loop's monitor, driven with a stand-in job (task states set
by hand; model_dir and the coordinator are real)."""

from __future__ import annotations

import time
from dataclasses import replace

import fsspec
from coordinator.tf_writes import FakeTrainer
from support import read_events

from launcher.monitors.coordinator import CoordinatorMonitor
from launcher.output.console import Console
from launcher.records.events import EventLog
from orchestrator.coordinator import Coordinator
from orchestrator.decisions import TaskState


class Lines(Console):
    def __init__(self):
        super().__init__()
        self.lines: list[str] = []

    def info(self, message: str) -> None:
        self.lines.append(message)


def tasks_of(*names: str) -> list[TaskState]:
    """Running tasks, as the job loop's snapshot shows them."""
    return [TaskState(name, name.split(":")[0], f"localhost:{2222 + i}")
            for i, name in enumerate(names)]


def wait_for(predicate, timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while not predicate() and time.monotonic() < deadline:
        time.sleep(0.05)
    assert predicate()


def test_monitor_reports_progress_and_ends_the_job(tmp_path):
    url = str(tmp_path / "model")
    trainer = FakeTrainer(fsspec.filesystem("file"), url, shards=1)
    console, events = Lines(), EventLog(str(tmp_path / "events.jsonl"))
    coordinator = Coordinator(url, max_steps=200, poll=0.05, stall=600)
    monitor = CoordinatorMonitor(coordinator, console, events, progress_every=0.0)
    tasks = tasks_of("ps:0", "chief:0")
    try:
        assert monitor.tick(tasks) is None
        trainer.save(100)
        wait_for(lambda: coordinator.progress().step == 100)
        assert monitor.tick(tasks) is None
        assert console.lines[-1].startswith("progress: step 100/200 (50%)")

        # a ps the job loop is about to restart shows alive in the snapshot; one it is not
        dead_ps = replace(tasks[0], alive=False, exit_status="killed (SIGKILL)")
        decision = monitor.tick([dead_ps, tasks[1]])
        assert decision.action == "lost" and "ps:0 (localhost:2222) killed (SIGKILL)" \
            in decision.reason
        assert decision.task == "ps:0"

        trainer.save(200)
        wait_for(lambda: coordinator.progress().step == 200)
        decision = monitor.tick(tasks)
        assert decision.action == "finish" and "model.ckpt-200" in decision.reason
    finally:
        monitor.close()
    recorded = [(e["event"], e.get("step"), e.get("action")) for e in
                read_events(str(tmp_path / "events.jsonl"))]
    assert recorded == [("checkpoint", 100, None), ("coordinator", 100, "lost"),
                        ("checkpoint", 200, None), ("coordinator", 200, "finish")]
