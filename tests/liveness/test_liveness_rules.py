"""The readiness and liveness rules with a fake prober and a fake clock (no sockets)."""

from __future__ import annotations

import pytest
from support import FakeClock

from launcher.liveness import Answer, Liveness, LivenessMonitor, NotReady, wait_ready

OK = Answer(True, "OK")
FROZEN = Answer(False, "DEADLINE_EXCEEDED")
NOBODY = Answer(False, "UNAVAILABLE")


class FakeProber:
    """Answers per address from a script: address -> list of answers (the last repeats)."""

    def __init__(self, script: dict[str, list[Answer]]):
        self.script = {a: list(v) for a, v in script.items()}
        self.asked: list[list[str]] = []
        self.forgotten: list[str] = []

    def ask_all(self, addresses):
        addresses = list(addresses)
        self.asked.append(addresses)
        out = {}
        for a in addresses:
            answers = self.script.get(a, [NOBODY])
            out[a] = answers.pop(0) if len(answers) > 1 else answers[0]
        return out

    def forget(self, address):
        self.forgotten.append(address)

    def close(self):
        pass


def test_wait_ready_returns_when_each_answered_and_times_each():
    clock = FakeClock()
    prober = FakeProber({"h:1": [NOBODY, NOBODY, OK], "h:2": [NOBODY, OK]})
    answered = wait_ready({"ps:0": "h:1", "ps:1": "h:2"}, prober, timeout=10,
                          clock=clock, sleep=clock.sleep, period=0.5)
    assert answered == {"ps:1": 0.5, "ps:0": 1.0}
    assert prober.asked == [["h:1", "h:2"], ["h:1", "h:2"], ["h:1"]]   # answered: not asked


def test_wait_ready_names_the_task_that_never_answers():
    clock = FakeClock()
    prober = FakeProber({"h:1": [OK], "h:2": [NOBODY]})
    with pytest.raises(NotReady) as e:
        wait_ready({"ps:0": "h:1", "ps:1": "h:2"}, prober, timeout=3, clock=clock,
                   sleep=clock.sleep, period=1)
    assert e.value.task == "ps:1"
    assert str(e.value).startswith("ps:1 (h:2) did not answer TensorFlow's gRPC within "
                                   "timeouts.start = 3 s (last answer: UNAVAILABLE)")
    assert clock.now == 3


def test_wait_ready_stops_when_check_raises():
    clock = FakeClock()

    def check():
        if clock.now >= 2:
            raise RuntimeError("ps:0 exited")

    with pytest.raises(RuntimeError, match="ps:0 exited"):
        wait_ready({"ps:0": "h:1"}, FakeProber({}), timeout=60, clock=clock,
                   sleep=clock.sleep, check=check, period=1)
    assert clock.now == 2


def test_a_task_that_never_answered_is_starting_not_lost():
    clock = FakeClock()
    live = Liveness(unresponsive=20, clock=clock)
    live.watch({"ps:0": ("h:1", 0.0)})
    for _ in range(100):
        clock.sleep(2)
        live.record({"ps:0": NOBODY})
    assert live.lost() == [] and live.not_answering() == []


def test_a_task_that_answered_then_went_silent_is_lost_after_unresponsive():
    clock = FakeClock()
    live = Liveness(unresponsive=20, clock=clock)
    live.watch({"ps:0": ("h:1", 0.0), "worker:0": ("h:2", 0.0)})
    live.record({"ps:0": OK, "worker:0": OK})          # t=0: both answer
    clock.sleep(2)
    live.record({"ps:0": FROZEN, "worker:0": OK})
    assert [w.name for w in live.not_answering()] == ["ps:0"]
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
    gone = live.watch({"ps:0": ("h:1", 30.0)})         # started again at t=30
    assert [w.name for w in gone] == ["ps:0"]
    assert live.lost() == []
    assert live.watch({}) and live.targets() == {}      # stopped: not watched


class ManualMonitor(LivenessMonitor):
    """The monitor without its thread: polls when the test says so."""

    def update(self, targets):
        for gone in self.liveness.watch(targets):
            self.prober.forget(gone.address)


def test_monitor_reports_first_answers_and_each_loss_once():
    clock = FakeClock()
    prober = FakeProber({"h:1": [OK, OK, FROZEN], "h:2": [NOBODY]})
    monitor = ManualMonitor(unresponsive=5, period=2, prober=prober, clock=clock)
    monitor.update({"ps:0": ("h:1", 0.0), "worker:0": ("h:2", 0.0)})
    clock.sleep(1)
    monitor.poll_once()
    assert monitor.take_events() == [("task_answering",
                                      {"task": "ps:0", "address": "h:1", "after": 1.0})]
    for _ in range(4):
        clock.sleep(2)
        monitor.poll_once()
    (lost,) = monitor.take_lost()
    assert monitor.reason(lost) == "ps:0 (h:1) has not answered TensorFlow's gRPC for 5 s"
    assert monitor.take_lost() == []                  # once per start
    assert [e for e, _ in monitor.take_events()] == ["task_unresponsive"]
    monitor.update({"ps:0": ("h:1", 20.0), "worker:0": ("h:2", 0.0)})
    assert prober.forgotten == ["h:1"]                # a restarted task gets a new channel
