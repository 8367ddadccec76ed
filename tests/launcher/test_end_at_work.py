"""Nothing is stopped in the middle of its work (launcher/ending.py): synchronous trainers
that all run are never stopped for timeouts.finish; trainers still writing model_dir are
waited for up to timeouts.save, which the closing lines name; trainers stopped at that
bound were cut short, and the job did not succeed. The real job loop over the scripted
backend and a fake clock; tests/ending/test_saves_real.py runs Kubeflow's MWMS shape."""

from __future__ import annotations

import pytest
from scripted_backend import Script, ScriptedBackend, run_job

from launcher.ending import WRITE_QUIET, EndRules, EndStep, Moments, TrainingView, end_step
from launcher.output.closing import Closing
from launcher.output.summary import closing_lines, summary_doc, training_of, verdict
from launcher.spec import Timeouts
from orchestrator.decisions import FINISH, Decision, TaskState

pytestmark = pytest.mark.usefixtures("scripted_backend")
MWMS = {"cluster": {"chief": 1, "worker": 1}, "strategy": "multi_worker_mirrored",
        "max_steps": 100, "timeouts": {"finish": 30, "save": 120, "kill": 3, "poll": 1}}
ASYNC = {"cluster": {"chief": 1, "worker": 1, "ps": 1}, "max_steps": 100,
         "timeouts": {"finish": 30, "save": 120, "kill": 3, "poll": 1}}


class Reached:
    """A coordinator stand-in: max_steps reached at 5 s; model_dir written until
    ``writes_until`` (the view's ``written_for``)."""

    def __init__(self, clock, writes_until: float = 0.0):
        self.clock, self.writes_until = clock, writes_until

    def tick(self, tasks):
        return Decision(FINISH, "checkpoint model.ckpt-100 reached max_steps 100") \
            if self.clock() >= 5 else None

    def close(self):
        pass

    def view(self) -> TrainingView:
        now = self.clock()
        written = min(now, self.writes_until)
        return TrainingView(100, latest_step=100, final_step=100,
                            written_for=now - written if written > 5 else None,
                            written="saved_model/variables/variables.data-00000-of-00001")


def run(backend, model, tmp_path, doc):
    return run_job(doc, backend, tmp_path, monitors=[model], training=model.view)


def words(result, name: str) -> str:
    return next(t.words() for t in result.tasks if t.name == name)


def test_synchronous_trainers_saving_together_are_never_stopped_for_timeouts_finish(tmp_path):
    """Kubeflow's MWMS example: every worker calls model.save after fit; the save takes
    far longer than timeouts.finish."""
    backend = ScriptedBackend({"chief:0": [Script(exit_at=100)],
                               "worker:0": [Script(exit_at=101)]})
    result, out = run(backend, Reached(backend.clock), tmp_path, MWMS)
    assert result.status == 0, result.reason
    assert (words(result, "chief:0"), words(result, "worker:0")) == ("0", "0")
    assert "stopping" not in out.getvalue()
    assert "waiting for chief:0, worker:0: synchronous trainers end together (a save " \
           "every worker makes) (at most timeouts.save 120s from training's end)" \
           in out.getvalue()
    assert result.waited == ["waited 65s past timeouts.finish for chief:0, worker:0: "
                             "synchronous trainers end together (a save every worker "
                             "makes) (at most timeouts.save 120s from training's end)"]
    assert result.cut_short == []


def test_a_synchronous_trainer_left_alone_gets_timeouts_finish_from_its_peers_end(tmp_path):
    backend = ScriptedBackend({"chief:0": [Script(exit_at=40)], "worker:0": [Script()]})
    result, out = run(backend, Reached(backend.clock), tmp_path, MWMS)
    assert words(result, "worker:0") == "stopped (SIGTERM)"
    assert "stopping worker:0: still running 30s after training was done " \
           "(timeouts.finish)" in out.getvalue()
    assert 70 <= result.duration < 72 and result.cut_short == []


def test_trainers_still_at_work_at_timeouts_save_are_cut_short_and_the_job_fails(tmp_path):
    backend = ScriptedBackend({"chief:0": [Script()], "worker:0": [Script()]})
    result, out = run(backend, Reached(backend.clock), tmp_path, MWMS)
    assert 125 <= result.duration < 127
    assert "stopping chief:0, worker:0: still at work 120s after training was done " \
           "(timeouts.save)" in out.getvalue()
    assert result.cut_short == ["chief:0, worker:0, stopped while still running together "
                                "(synchronous: a save every worker makes, the end of fit)"]
    closing = Closing(max_steps=100)
    short = verdict(result, closing)
    assert short == "work was cut short: " + result.cut_short[0]
    result.reason = short
    assert training_of(result) == "cut short"
    assert "cut short: chief:0, worker:0, stopped while still running together " \
           "(synchronous: a save every worker makes, the end of fit)" \
           in closing_lines(result, closing)
    assert summary_doc(result, closing, [])["cut_short"] == result.cut_short


def test_an_asynchronous_chief_still_writing_its_export_is_waited_for(tmp_path):
    """An Estimator chief that exports after training: past timeouts.finish while it writes
    model_dir, it is waited for; it ends by itself."""
    backend = ScriptedBackend({"chief:0": [Script(exit_at=60)], "worker:0": [Script()]})
    result, out = run(backend, Reached(backend.clock, writes_until=59), tmp_path, ASYNC)
    assert result.status == 0 and words(result, "chief:0") == "0"
    assert "waiting for chief:0, worker:0: model_dir is being written " \
           "(saved_model/variables/variables.data-00000-of-00001)" in out.getvalue()
    assert result.cut_short == [] and len(result.waited) == 1


def test_a_trainer_that_writes_nothing_past_timeouts_finish_is_stopped_as_before(tmp_path):
    backend = ScriptedBackend({"chief:0": [Script()], "worker:0": [Script()]})
    result, out = run(backend, Reached(backend.clock), tmp_path, ASYNC)
    assert "stopping chief:0, worker:0: still running 30s after training was done " \
           "(timeouts.finish)" in out.getvalue()
    assert 35 <= result.duration < 37 and result.waited == [] and result.cut_short == []


def test_the_rule_as_a_pure_function():
    def tasks(**states):
        return [TaskState(n, n.split(":")[0], **{"running": True, **states.get(n, {})})
                for n in ("chief:0", "worker:0")]
    t = Timeouts(finish=30.0, save=120.0, evaluator=900.0)
    view = TrainingView(100, reached_at=0.0, latest_step=100, final_step=100)
    assert end_step(29.0, Moments(), tasks(), view, EndRules(t, True)) == EndStep()
    assert end_step(30.0, Moments(), tasks(), view, EndRules(t, True)).wait.startswith(
        "chief:0, worker:0")
    assert end_step(120.0, Moments(), tasks(), view, EndRules(t, True)).cut
    peer_ended = tasks(**{"chief:0": {"running": False, "status": 0, "ended_at": 50.0}})
    assert end_step(79.0, Moments(), peer_ended, view, EndRules(t, True)) == EndStep()
    assert end_step(80.0, Moments(), peer_ended, view, EndRules(t, True)).stop == \
        ("worker:0",)
    writing = TrainingView(100, reached_at=0.0, latest_step=100, final_step=100,
                           written_for=WRITE_QUIET - 1, written="export/1/saved_model.pb")
    quiet = TrainingView(100, reached_at=0.0, latest_step=100, final_step=100,
                         written_for=WRITE_QUIET, written="export/1/saved_model.pb")
    assert end_step(40.0, Moments(), tasks(), writing, EndRules(t, False)).wait
    assert end_step(40.0, Moments(), tasks(), quiet, EndRules(t, False)).stop == \
        ("chief:0", "worker:0")
    cut = end_step(120.0, Moments(), tasks(), writing, EndRules(t, False))
    assert cut.cut == "chief:0, worker:0, stopped while still writing model_dir " \
                      "(export/1/saved_model.pb changed 9s before)"
    # a synchronous script that trains on past max_steps is not at work: stopped at once
    on = TrainingView(100, reached_at=0.0, latest_step=200, final_step=150)
    assert "still moving" in end_step(1.0, Moments(), tasks(), on, EndRules(t, True)).reason
