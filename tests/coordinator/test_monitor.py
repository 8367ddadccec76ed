"""The coordinator as the job loop's monitor, driven with a stand-in job (task states set
by hand; model_dir and the coordinator are real)."""

from __future__ import annotations

import time
from types import SimpleNamespace

import fsspec
from tf_writes import FakeTrainer

from launcher.coordination import CoordinatorMonitor
from launcher.events import EventLog, read_events
from launcher.job import TaskRun
from launcher.tf_config import TaskPlan
from orchestrator.coordinator import Coordinator


class Lines:
    def __init__(self):
        self.lines: list[str] = []

    def info(self, message: str) -> None:
        self.lines.append(message)


def job_with(*names: str, **fields) -> SimpleNamespace:
    runs = []
    for name in names:
        type_, index = name.split(":")
        run = TaskRun(TaskPlan(type_, int(index), "localhost", 2222 + len(runs), ["x"], {}),
                      log_path="/dev/null")
        run.handle = object()   # started
        runs.append(run)
    return SimpleNamespace(runs=runs, due={}, restart_count=0, **fields)


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
    job = job_with("ps:0", "chief:0")
    try:
        assert monitor.tick(job) is None
        trainer.save(100)
        wait_for(lambda: coordinator.progress().step == 100)
        assert monitor.tick(job) is None
        assert console.lines[-1].startswith("progress: step 100/200 (50%)")

        ps = job.runs[0]
        ps.status = -9
        job.due["ps:0"] = time.monotonic() + 1       # the job loop restarts it
        assert monitor.tick(job) is None
        del job.due["ps:0"]                          # ... or it does not
        decision = monitor.tick(job)
        assert decision.action == "fail" and "ps:0 (localhost:2222) killed (SIGKILL)" \
            in decision.reason
        assert getattr(decision, "task", "ps:0") == "ps:0"

        ps.status = None
        trainer.save(200)
        wait_for(lambda: coordinator.progress().step == 200)
        decision = monitor.tick(job)
        assert decision.action == "finish" and "model.ckpt-200" in decision.reason
    finally:
        monitor.close()
    recorded = [(e["event"], e.get("step"), e.get("action")) for e in
                read_events(str(tmp_path / "events.jsonl"))]
    assert recorded == [("checkpoint", 100, None), ("coordinator", 100, "fail"),
                        ("checkpoint", 200, None), ("coordinator", 200, "finish")]
