"""A preemption notice (SIGTERM to the launcher while training runs), on the real job loop
over the scripted backend and a fake clock: the savers are told first, the launcher waits
for their checkpoint within timeouts.preempt, then stops the workers, the evaluator and
last the ps. The real-TensorFlow side: tests/faults/test_preemption.py."""

from __future__ import annotations

import json
import os
import signal

import pytest
from scripted_backend import Script, ScriptedBackend, run_job

from launcher.api import dry_run, parse_spec
from launcher.ending import LOOK_AGAIN, TrainingView
from launcher.errors import SpecError
from launcher.plan import SITE_HERE
from launcher.signals import PREEMPTED
from orchestrator.decisions import Decision
from orchestrator.preemption import NOTHING_TO_SAVE, SAVING

pytestmark = pytest.mark.usefixtures("scripted_backend")

CLUSTER = {"chief": 1, "worker": 1, "ps": 1}
NOTICE_AT = 5.0         # when SIGTERM reaches the launcher
SAVE_TAKES = 3.0        # from the notice to the chief's checkpoint complete in model_dir
ARMED = {"chief:0": [Script(notice_lines=[SAVING])]}    # its handler answers the notice


class SigtermAt:
    """A monitor that plays the signal: SIGTERM to the launcher at ``at`` (its handler's
    own effect, ``Job.interrupted``)."""

    def __init__(self, backend: ScriptedBackend, at: float = NOTICE_AT, sig=signal.SIGTERM):
        self.backend, self.at, self.sig, self.job = backend, at, sig, None

    def __call__(self, job) -> None:
        self.job = job

    def tick(self, tasks) -> Decision | None:
        if self.backend.clock() >= self.at and not self.job.interrupted:
            self.job.interrupted = self.sig
        return None

    def close(self) -> None:
        pass


def chief_saves(backend: ScriptedBackend, takes: float | None = SAVE_TAKES):
    """model_dir as the coordinator reads it: step 300 saved before, the chief at 611;
    ``takes`` s after the chief got the notice its checkpoint at 611 is complete (None:
    it never saves)."""
    def view() -> TrainingView:
        handles = backend.handles.get("chief:0") or []
        got = handles[0].signalled_at if handles and signal.SIGURG in handles[0].signals \
            else None
        saved = takes is not None and got is not None and backend.clock() >= got + takes
        return TrainingView(max_steps=1000, latest_step=611, final_step=611 if saved else 300)
    return view


def run(tmp_path, backend, scripts_view, sig=signal.SIGTERM, **timeouts):
    notice = SigtermAt(backend, sig=sig)
    return run_job({"cluster": CLUSTER, "evaluator": "localhost",
                    "timeouts": {"kill": 2, "preempt": 20, **timeouts}},
                   backend, tmp_path, monitors=[notice], training=scripts_view, before=notice)


def first_signal(backend, name: str) -> float:
    return backend.handles[name][0].signalled_at


def test_the_chief_saves_first_then_workers_and_evaluator_then_the_ps(tmp_path):
    backend = ScriptedBackend(ARMED)
    result, out = run(tmp_path, backend, chief_saves(backend))
    assert result.status == PREEMPTED
    assert result.reason == "preempted by SIGTERM; checkpoint at step 611 complete in model_dir"
    chief = backend.handles["chief:0"][0]
    assert chief.signals[0] == signal.SIGURG      # the notice, then the ordered stop
    assert NOTICE_AT <= chief.signalled_at < NOTICE_AT + 0.5
    saved_at = chief.signalled_at + SAVE_TAKES
    # nothing else was signalled while the chief saved; the ps was stopped last
    for name in ("worker:0", "evaluator:0", "ps:0"):
        assert first_signal(backend, name) >= saved_at, name
    assert first_signal(backend, "ps:0") >= max(
        first_signal(backend, n) for n in ("worker:0", "evaluator:0", "chief:0"))
    assert backend.handles["ps:0"][0].signals == [signal.SIGTERM]
    assert result.preemption["notified"] == ["chief:0"]
    assert result.preemption["step_at_notice"] == 611
    assert result.preemption["checkpoint_at_notice"] == 300
    assert all(t.restarts == 0 for t in result.tasks)       # no restart charged
    assert not result.incidents
    assert ("tfcluster: preemption notice: checkpoint at step 611 complete in model_dir; "
            "stopping the tasks, the ps last") in out.lines


def test_a_chief_that_never_saves_waits_out_the_bound_then_the_normal_stop(tmp_path):
    backend = ScriptedBackend(ARMED)
    result, out = run(tmp_path, backend, chief_saves(backend, takes=None), preempt=20)
    assert result.status == PREEMPTED
    assert first_signal(backend, "worker:0") >= NOTICE_AT + 20
    assert first_signal(backend, "ps:0") < NOTICE_AT + 20 + 2 * 2 + 1    # two kill windows
    said = [line for line in out.lines if "stopping the tasks" in line]
    assert said == ["tfcluster: preemption notice: no new checkpoint within 20s "
                    "(timeouts.preempt); stopping the tasks, the ps last"], out.lines
    assert backend.handles["ps:0"][0].signals == [signal.SIGTERM]
    assert backend.handles["chief:0"][0].signals[:2] == [signal.SIGURG, signal.SIGTERM]


def test_a_chief_without_a_handler_is_not_waited_for_past_its_answer_time(tmp_path):
    """No answer: not Python, or no sitecustomize in it. The notice was sent again each
    second meanwhile (one sent as the task started, before its handler armed, is lost)."""
    backend = ScriptedBackend({})
    result, out = run(tmp_path, backend, chief_saves(backend, takes=None), preempt=60)
    assert result.status == PREEMPTED
    assert result.reason == ("preempted by SIGTERM; chief:0 did not answer the notice within "
                             "10s (no notice handler in it: docs/preemption.md)")
    assert NOTICE_AT + 10 <= first_signal(backend, "worker:0") < NOTICE_AT + 11
    notices = backend.handles["chief:0"][0].signals.count(signal.SIGURG)
    assert 10 <= notices <= 12


def test_a_chief_with_nothing_to_save_ends_the_wait_at_once(tmp_path):
    backend = ScriptedBackend({"chief:0": [Script(notice_lines=[NOTHING_TO_SAVE])]})
    result, out = run(tmp_path, backend, chief_saves(backend, takes=None), preempt=600)
    assert result.status == PREEMPTED
    assert first_signal(backend, "worker:0") < NOTICE_AT + 2
    assert f"[chief:0] {NOTHING_TO_SAVE}" in out.lines or NOTHING_TO_SAVE in out.getvalue()


def test_a_chief_that_ends_without_saving_ends_the_wait(tmp_path):
    """A saver that ended (however) saves nothing more: the wait ends with it."""
    backend = ScriptedBackend({"chief:0": [Script(exit_at=NOTICE_AT + 1, status=1)]})
    result, out = run(tmp_path, backend, chief_saves(backend, takes=None), preempt=600)
    assert result.status == PREEMPTED
    assert result.reason == "preempted by SIGTERM; chief:0 ended without a new checkpoint"
    # model_dir is read on LOOK_AGAIN s (its checkpoint may land in the next poll)
    assert first_signal(backend, "worker:0") < NOTICE_AT + 1 + LOOK_AGAIN + 1
    assert not result.incidents             # its exit was not judged: no restart


def test_ctrl_c_stops_at_once_as_before(tmp_path):
    backend = ScriptedBackend(ARMED)
    result, _ = run(tmp_path, backend, chief_saves(backend), sig=signal.SIGINT)
    assert result.status == 128 + signal.SIGINT and result.preemption is None
    assert signal.SIGURG not in backend.handles["chief:0"][0].signals


def test_timeouts_preempt_0_stops_at_once_as_before(tmp_path):
    backend = ScriptedBackend(ARMED)
    result, _ = run(tmp_path, backend, chief_saves(backend), preempt=0)
    assert result.status == 128 + signal.SIGTERM and result.preemption is None
    assert result.reason == "interrupted by SIGTERM"
    assert signal.SIGURG not in backend.handles["chief:0"][0].signals


@pytest.mark.parametrize("value, words", [
    (-1, "timeouts.preempt: must be at least 0.0, got -1"),
    ("60", "timeouts.preempt: must be a number, got a string"),
])
def test_a_bad_timeouts_preempt_is_one_line(tmp_path, value, words):
    with pytest.raises(SpecError) as e:
        run_job({"cluster": CLUSTER, "timeouts": {"preempt": value}}, ScriptedBackend({}),
                tmp_path)
    assert words in str(e.value) and "\n" not in str(e.value)


def plan_of(doc: dict):
    from launcher.plan import NoticeRoute, build_plan

    spec = parse_spec(json.dumps({"command": ["train"], "model_dir": "/m", **doc}))
    return build_plan(spec, port_for=lambda host: 2222, notice=NoticeRoute())


def test_the_plan_arms_the_notice_first_on_the_tasks_pythonpath():
    plan = plan_of({"cluster": CLUSTER, "env": {"PYTHONPATH": "/mine"}})
    for task in plan.tasks:
        assert task.env["TFCLUSTER_PREEMPT"] == "URG"
        assert task.env["TFCLUSTER_PREEMPT_GRACE"] == "60"
        assert task.env["PYTHONPATH"] == f"{SITE_HERE}{os.pathsep}/mine"
    assert os.path.isfile(os.path.join(SITE_HERE, "sitecustomize.py"))


@pytest.mark.parametrize("doc", [
    {"cluster": CLUSTER, "timeouts": {"preempt": 0}},       # the notice turned off
    {"cluster": {"worker": 2}},     # MultiWorkerMirroredStrategy: TensorFlow's own handler
])
def test_no_notice_is_armed_when_off_or_for_mwms(doc):
    for task in plan_of(doc).tasks:
        assert "TFCLUSTER_PREEMPT" not in task.env and "PYTHONPATH" not in task.env


def test_kubernetes_pods_carry_the_grace_period_and_the_sigterm_notice():
    doc = json.loads(dry_run({"cluster": {"chief": 1, "ps": 1}, "command": ["train"],
                              "model_dir": "/m", "backend": "kubernetes",
                              "timeouts": {"preempt": 90, "kill": 5}}, as_json=True))
    rendered = doc["rendered"]
    assert rendered.count("terminationGracePeriodSeconds: 95") == 2, rendered
    assert "value: URG,TERM" in rendered
    assert "/opt/tfcluster/orchestrator/preempt_site" in rendered


def test_mwms_trainers_all_get_sigterm_the_notice_tensorflow_listens_to(tmp_path):
    """MultiWorkerMirroredStrategy: PreemptionCheckpointHandler answers SIGTERM in every
    trainer; without it they end by it, which ends the wait."""
    backend = ScriptedBackend({})
    notice = SigtermAt(backend)
    result, _ = run_job({"cluster": {"chief": 1, "worker": 2},
                         "timeouts": {"kill": 2, "preempt": 20}},
                        backend, tmp_path, monitors=[notice], before=notice,
                        training=lambda: TrainingView(max_steps=1000, final_step=300))
    assert result.status == PREEMPTED
    assert result.preemption["notified"] == ["chief:0", "worker:0", "worker:1"]
    for name in ("chief:0", "worker:0", "worker:1"):
        assert backend.handles[name][0].signals == [signal.SIGTERM]
        assert first_signal(backend, name) < NOTICE_AT + 0.5
    assert result.reason == ("preempted by SIGTERM; chief:0, worker:0, worker:1 ended "
                             "without a new checkpoint")
    assert all(t.words() == "stopped (SIGTERM)" for t in result.tasks)


def test_mwms_trainers_that_swallow_sigterm_are_waited_for_10s_then_stopped(tmp_path):
    """TensorFlow's coordination service swallows SIGTERM in MultiWorkerMirroredStrategy
    trainers: without PreemptionCheckpointHandler nothing saves, and the launcher stops
    waiting 10 s after the notice."""
    swallows = [Script(ignores_term=True)]
    backend = ScriptedBackend({"chief:0": swallows, "worker:0": swallows})
    notice = SigtermAt(backend)
    result, _ = run_job({"cluster": {"chief": 1, "worker": 1},
                         "timeouts": {"kill": 2, "preempt": 60}},
                        backend, tmp_path, monitors=[notice], before=notice,
                        training=lambda: TrainingView(max_steps=1000, final_step=300))
    assert result.status == PREEMPTED
    assert result.reason.endswith("did not answer the notice within 10s (no notice handler "
                                  "in it: docs/preemption.md)")
    chief = backend.handles["chief:0"][0]
    assert chief.signals == [signal.SIGTERM, signal.SIGTERM, signal.SIGKILL]
    assert result.duration < NOTICE_AT + 10 + 2 + 1
