"""Readiness and liveness rules with a fake prober, a fake clock and the scripted in-memory
backend (tests/scripted_backend.py; no sockets, no processes): who counts as lost and when,
and what the job loop does with it: a ps that never answers fails the job naming it, a lost
task is killed at once and goes through its restart policy."""

from __future__ import annotations

import json
import os
import signal

from scripted_backend import Lines, Script, ScriptedBackend
from support import FakeClock, read_events

from launcher.api import parse_spec
from launcher.job import Job
from launcher.monitors import Watch
from launcher.monitors.liveness import Answer, Liveness, LivenessMonitor
from launcher.output.console import Console
from launcher.plan import build_plan
from launcher.records.events import EventLog
from launcher.tasks import Pace
from orchestrator.decisions import LOST, TaskState

OK = Answer(True, "OK")
FROZEN = Answer(False, "DEADLINE_EXCEEDED")
NOBODY = Answer(False, "UNAVAILABLE")


class FakeProber:
    """Answers per address: a function of the address (and the test's state)."""

    def __init__(self, answer):
        self.answer = answer
        self.asked: list[list[str]] = []
        self.forgotten: list[str] = []

    def ask_all(self, addresses):
        addresses = list(addresses)
        self.asked.append(addresses)
        return {a: self.answer(a) for a in addresses}

    def forget(self, address):
        self.forgotten.append(address)

    def close(self):
        pass


# ----------------------------------------------------------------------------- rules
def test_a_task_that_never_answered_is_starting_not_lost():
    clock = FakeClock()
    live = Liveness(unresponsive=20, clock=clock)
    live.watch({"ps:0": ("h:1", 0.0)})
    for _ in range(100):
        clock.sleep(2)
        live.record({"ps:0": NOBODY})
    assert live.lost() == [] and live.not_answering() == []
    assert not live.answered("ps:0", 0.0)


def test_a_task_that_answered_then_went_silent_is_lost_after_unresponsive():
    clock = FakeClock()
    live = Liveness(unresponsive=20, clock=clock)
    live.watch({"ps:0": ("h:1", 0.0), "worker:0": ("h:2", 0.0)})
    live.record({"ps:0": OK, "worker:0": OK})          # t=0: both answer
    assert live.answered("ps:0", 0.0) and not live.answered("ps:0", 5.0)
    clock.sleep(2)
    live.record({"ps:0": FROZEN, "worker:0": OK})
    assert live.not_answering() == ["ps:0"]
    clock.sleep(17)
    live.record({"ps:0": FROZEN, "worker:0": OK})      # t=19: not yet
    assert live.lost() == []
    clock.sleep(1)
    (lost,) = live.lost()                              # t=20
    assert (lost.name, lost.address, lost.silent_for, lost.code) == \
        ("ps:0", "h:1", 20, "DEADLINE_EXCEEDED")


def test_an_answer_in_between_resets_the_silence():
    clock = FakeClock()
    live = Liveness(unresponsive=10, clock=clock)
    live.watch({"ps:0": ("h:1", 0.0)})
    live.record({"ps:0": OK})
    clock.sleep(9)
    live.record({"ps:0": OK})
    clock.sleep(1)
    live.record({"ps:0": FROZEN})
    clock.sleep(8)
    assert live.lost() == []


def test_a_restarted_task_starts_afresh():
    clock = FakeClock()
    live = Liveness(unresponsive=10, clock=clock)
    live.watch({"ps:0": ("h:1", 0.0)})
    live.record({"ps:0": OK})
    clock.sleep(30)
    live.record({"ps:0": NOBODY})
    assert [x.name for x in live.lost()] == ["ps:0"]
    asked = {n: since for n, (_, since) in live.due().items()}    # asked the old process
    gone = live.watch({"ps:0": ("h:1", 30.0)})         # started again at t=30
    assert [w.name for w in gone] == ["ps:0"]
    assert live.lost() == []
    live.record({"ps:0": OK}, asked=asked)             # the old process's late answer
    assert not live.answered("ps:0", 30.0)
    assert live.watch({}) and live.due() == {}           # stopped: not watched


def test_a_starting_task_is_asked_often_then_every_period():
    clock = FakeClock()
    live = Liveness(unresponsive=10, period=2.0, startup=1.0, clock=clock)
    live.watch({"ps:0": ("h:1", 0.0)})
    asked = 0
    for _ in range(20):                                  # 4 s in steps of 0.2 s
        asked += bool(live.due())
        clock.sleep(0.2)
    assert asked == 5 + 1     # every 0.2 s during the first second, then every 2 s


# ----------------------------------------------------------------------------- monitor
def state(name: str, address: str, started: float, running: bool = True,
          stopped: bool = False) -> TaskState:
    return TaskState(name, name.split(":")[0], address, started_at=started, running=running,
                     stopped=stopped)


def test_monitor_answers_lost_once_per_start_and_logs_what_it_saw():
    clock = FakeClock()
    frozen = set()
    prober = FakeProber(lambda a: FROZEN if a in frozen else OK)
    written = []

    class Events:
        def write(self, event, **fields):
            written.append((event, fields))

    monitor = LivenessMonitor(5, Events(), period=2, prober=prober, clock=clock,
                              threaded=False)
    tasks = [state("ps:0", "h:1", 0.0), state("worker:0", "h:2", 0.0),
             TaskState("evaluator:0", "evaluator", "h:3", started_at=0.0, running=True)]
    assert monitor.tick(tasks) is None
    clock.sleep(1)
    monitor.poll_once()
    assert prober.asked == [["h:1", "h:2"]]              # the evaluator has no TF server
    assert monitor.tick(tasks) is None
    assert written == [("task_answering", {"task": "ps:0", "address": "h:1", "after": 1.0}),
                       ("task_answering", {"task": "worker:0", "address": "h:2",
                                           "after": 1.0})]
    frozen.add("h:1")
    decisions = []
    for _ in range(5):
        clock.sleep(1.25)
        monitor.poll_once()
        decisions.append(monitor.tick(tasks))
    lost = [d for d in decisions if d is not None]
    assert len(lost) == 1 and lost[0].action == LOST and lost[0].tasks == ("ps:0",)
    assert lost[0].reason == "ps:0 (h:1) has not answered TensorFlow's gRPC for 5 s"
    assert monitor.not_answering() == ["ps:0"]
    assert written[-1][0] == "task_unresponsive" and written[-1][1]["task"] == "ps:0"
    restarted = [state("ps:0", "h:1", 20.0), tasks[1]]
    assert monitor.tick(restarted) is None
    assert prober.forgotten == ["h:1"]                   # a new channel for the new process
    assert not monitor.answered("ps:0", 20.0)


# ----------------------------------------------------------------------------- job loop
def make_job(tmp_path, scripts, answer, **fields):
    """The real job loop over a scripted backend, with a liveness monitor whose probe
    answers ``answer(task name, now)``; the monitor polls on every wait of the loop."""
    doc = {"name": "gate", "cluster": {"chief": 1, "worker": 1, "ps": 1},
           "command": ["train"], "model_dir": str(tmp_path / "m"), "max_steps": 10,
           "timeouts": {"start": 5, "unresponsive": 4, "kill": 1}}
    doc.update(fields)
    spec = parse_spec(json.dumps(doc))
    backend = ScriptedBackend(scripts)
    plan = build_plan(spec, port_for=backend.allocate_port)
    clock = backend.clock
    names = {t.address: t.name for t in plan.tasks}
    prober = FakeProber(lambda address: answer(names[address], clock.now))
    os.makedirs(tmp_path / "run")
    events = EventLog(str(tmp_path / "run" / "events.jsonl"))
    monitor = LivenessMonitor(plan.timeouts.unresponsive, events, period=1, startup=5,
                              prober=prober, clock=clock, threaded=False)
    out = Lines()

    def wait(secs):
        clock.sleep(secs)
        monitor.poll_once()

    job = Job(plan, backend, str(tmp_path / "run"), Console(out, out),
              Watch([monitor], readiness=monitor), events, pace=Pace(clock, wait))
    return job, backend, out


def test_every_task_starts_at_once_and_the_ps_answer_time_is_logged(tmp_path):
    job, backend, out = make_job(tmp_path, {"chief:0": [Script(exit_at=4)]},
                                 lambda name, now: OK if name == "ps:0" and now >= 2 else NOBODY)
    result = job.run()
    assert result.status == 0, out.getvalue()
    assert [name for _, name in backend.starts] == ["ps:0", "chief:0", "worker:0"]
    ready = [e for e in read_events(str(tmp_path / "run" / "events.jsonl"))
             if e["event"] == "task_answering"]
    assert [e["task"] for e in ready] == ["ps:0"]
    assert 2.0 <= ready[0]["after"] < 2.5      # seconds from the ps's start to its answer


def test_a_ps_that_never_answers_fails_the_job_naming_it(tmp_path):
    job, backend, out = make_job(tmp_path, {}, lambda name, now: NOBODY)
    result = job.run()
    assert result.status == 1
    port = backend.handles["ps:0"][0].task.port
    assert result.reason.startswith(
        f"ps:0 (localhost:{port}) did not answer TensorFlow's gRPC within timeouts.start = "
        f"5 s (last probe: UNAVAILABLE); the trainers cannot train without it")
    assert [name for _, name in backend.starts] == ["ps:0", "chief:0", "worker:0"]
    assert all(h[0].ended is not None for h in backend.handles.values())   # all stopped
    assert 5 <= backend.clock.now < 6


def test_a_frozen_worker_is_killed_at_once_and_restarted_alone(tmp_path):
    # worker:0's first start freezes at t=3 (a frozen process acts on SIGKILL alone); the
    # chief ends the job once the worker is back
    scripts = {"worker:0": [Script(ignores_term=True), Script()],
               "chief:0": [Script(exit_at=12)]}

    def answer(name, now):
        frozen = name == "worker:0" and now >= 3 and len(backend.handles[name]) == 1
        return FROZEN if frozen else OK

    job, backend, out = make_job(tmp_path, scripts, answer)
    result = job.run()
    assert result.status == 0, out.getvalue()
    assert [name for _, name in backend.starts] == ["ps:0", "chief:0", "worker:0", "worker:0"]
    assert any(line.startswith("tfcluster: worker:0 (localhost:") and line.endswith(
        "has not answered TensorFlow's gRPC for 4 s; restarting worker:0 in 1s (restart 1 "
        "of 3)") for line in out.lines), out.getvalue()
    assert backend.handles["worker:0"][0].signals == [signal.SIGKILL]   # no SIGTERM first
    assert result.tasks[2].restarts == 1


def test_with_policy_never_a_frozen_ps_fails_the_job_naming_it(tmp_path):
    job, backend, out = make_job(
        tmp_path, {"ps:0": [Script(ignores_term=True)]},
        lambda name, now: FROZEN if name == "ps:0" and now >= 3 else OK,
        restart={"ps": "never"})
    result = job.run()
    assert result.status == 1
    assert result.reason.startswith("ps:0 (localhost:")
    assert result.reason.endswith("has not answered TensorFlow's gRPC for 4 s; restart policy "
                                  "of ps is never")
    assert backend.handles["ps:0"][0].signals == [signal.SIGKILL]       # no SIGTERM first
    # frozen at 3: lost 4 s after its last answer (at most one period before), so by 8
    assert 6 <= backend.clock.now < 8
