"""The end uses the notice: a script that neither stops at max_steps nor saves often (a
stock Estimator with RunConfig's 600 s checkpoints, a TF1 loop with its defaults) gets the
preemption notice's save request once its step reached max_steps and no checkpoint covers
it, while every ps serves; the launcher waits for that checkpoint, then ends the job as
usual. A script that cannot save on request is said at once, waited for within
timeouts.save, and its lost steps are named. The real job loop over the scripted backend
and a fake clock; the real-TensorFlow side: tests/ending/test_save_request_real.py."""

from __future__ import annotations

import signal

import pytest
from scripted_backend import Script, ScriptedBackend, run_job

from launcher.ending import AT_MAX_STEPS, END_GRACE, JobResult, TrainingView, save_due
from launcher.output.closing import Closing
from launcher.output.summary import closing_lines, unsaved_words, verdict
from orchestrator.checkpoints import Checkpoint
from orchestrator.decisions import FINISH, Decision
from orchestrator.preemption import NOTHING_TO_SAVE, SAVING

pytestmark = pytest.mark.usefixtures("scripted_backend")

CLUSTER = {"chief": 1, "worker": 1, "ps": 1}
TIMEOUTS = {"finish": 30, "save": 120, "evaluator": 300, "kill": 2, "poll": 1}
MAX_STEPS = 600
RATE = 100.0           # steps/s: max_steps is reached at 6 s
SAVE_TAKES = 1.0       # from the request to the chief's checkpoint complete
PERIODIC = 300         # the checkpoint written before (a 600 s timer's first)


class Model:
    """A coordinator stand-in over a script that trains on past max_steps: the events
    file's step moves RATE steps/s; the chief saves PERIODIC at once and, ``takes`` s after
    it got the request (None: never), the step it was at; ``own_save_at``: when the
    script's own timer saves (None: never)."""

    def __init__(self, backend: ScriptedBackend, takes: float | None = SAVE_TAKES,
                 own_save_at: float | None = None, stops_itself: bool = False):
        self.backend, self.takes, self.own_save_at = backend, takes, own_save_at
        self.stops_itself = stops_itself

    def step(self) -> int:
        step = int(RATE * self.backend.clock())
        return min(step, MAX_STEPS) if self.stops_itself else step

    def saved(self) -> int:
        now = self.backend.clock()
        if self.stops_itself and self.step() >= MAX_STEPS:
            return MAX_STEPS
        chief = (self.backend.handles.get("chief:0") or [None])[0]
        got = chief.noticed if chief is not None else None
        if self.takes is not None and got is not None and now >= got + self.takes:
            return int(RATE * got)
        if self.own_save_at is not None and now >= self.own_save_at:
            return int(RATE * self.own_save_at)
        return PERIODIC

    def tick(self, tasks) -> Decision | None:
        if self.step() >= MAX_STEPS:
            return Decision(FINISH, f"step {self.step()} in the chief's events file reached "
                                    f"max_steps {MAX_STEPS}")
        return None

    def close(self) -> None:
        pass

    def view(self) -> TrainingView:
        return TrainingView(MAX_STEPS, latest_step=self.step(), final_step=self.saved())


def run(backend: ScriptedBackend, model: Model, tmp_path, **timeouts):
    return run_job({"cluster": CLUSTER, "max_steps": MAX_STEPS,
                    "timeouts": {**TIMEOUTS, **timeouts}},
                   backend, tmp_path, monitors=[model], training=model.view)


def first_signal(backend: ScriptedBackend, name: str) -> float:
    return backend.handles[name][0].signalled_at


def test_the_chief_saves_on_request_at_max_steps_then_the_job_ends_as_usual(tmp_path):
    backend = ScriptedBackend({"chief:0": [Script(notice_lines=[SAVING],
                                                  notice_exit=SAVE_TAKES + 0.5)]})
    result, out = run(backend, Model(backend), tmp_path)
    assert result.status == 0, out.getvalue()
    chief = backend.handles["chief:0"][0]
    assert chief.signals[0] == signal.SIGURG
    asked = chief.noticed
    assert MAX_STEPS / RATE <= asked < MAX_STEPS / RATE + 0.2   # at once, not a timer's
    saved = int(RATE * asked)
    # nothing else was stopped while the chief saved; the ps went last
    assert first_signal(backend, "worker:0") >= asked + SAVE_TAKES
    assert first_signal(backend, "ps:0") >= first_signal(backend, "worker:0")
    assert status(result, "chief:0") == "0"            # it ended by itself, saved
    record = result.save_request
    assert record["saved"] and record["notified"] == ["chief:0"]
    assert record["outcome"] == f"checkpoint at step {saved} complete in model_dir"
    lines = [line for line in out.lines if AT_MAX_STEPS in line]
    assert lines[0].startswith(f"tfcluster: {AT_MAX_STEPS}: step ")
    assert "chief:0 to save a checkpoint now" in lines[0]
    assert f"checkpoint at step {saved} complete in model_dir" in lines[-1]
    assert not any("waiting for" in line for line in out.lines)   # no timeouts.save wait
    assert result.duration < asked + SAVE_TAKES + 15         # not timeouts.finish/save


def test_a_script_that_stops_at_max_steps_by_itself_gets_no_request(tmp_path):
    backend = ScriptedBackend({"chief:0": [Script(exit_at=MAX_STEPS / RATE + 0.5)],
                               "worker:0": [Script(exit_at=MAX_STEPS / RATE + 0.5)]})
    result, out = run(backend, Model(backend, takes=None, stops_itself=True), tmp_path)
    assert result.status == 0
    assert signal.SIGURG not in backend.handles["chief:0"][0].signals
    assert result.save_request is None and AT_MAX_STEPS not in out.getvalue()


def test_a_chief_without_a_handler_is_said_and_waited_for_within_timeouts_save(tmp_path):
    backend = ScriptedBackend({})       # the chief answers nothing (not Python, say)
    result, out = run(backend, Model(backend, takes=None), tmp_path)
    said = [line for line in out.lines if line.startswith(f"tfcluster: {AT_MAX_STEPS}: ")
            and "cannot save on request" in line]
    assert said == [f"tfcluster: {AT_MAX_STEPS}: chief:0 did not answer the notice within "
                    "10s (no notice handler in it: docs/preemption.md): it cannot save on "
                    "request; waiting for its own save or end (at most timeouts.save 120s "
                    "from training's end)"], out.lines
    reached = MAX_STEPS / RATE
    stopped = first_term(backend, "chief:0")
    assert reached + TIMEOUTS["save"] <= stopped < reached + TIMEOUTS["save"] + 2
    assert f"no checkpoint at max_steps {MAX_STEPS} within 120s after training was done " \
           "(timeouts.save): stopped unsaved" in out.getvalue()
    assert not result.cut_short         # nothing was being saved: the verdict says more
    assert result.save_request is not None and not result.save_request["saved"]


def test_its_own_timer_save_ends_the_wait(tmp_path):
    backend = ScriptedBackend({"chief:0": [Script(notice_lines=[NOTHING_TO_SAVE])]})
    result, out = run(backend, Model(backend, takes=None, own_save_at=40.0), tmp_path)
    assert "nothing in chief:0 saves on a notice" in out.getvalue()
    assert 40 <= first_term(backend, "chief:0") < 42       # the script ignores max_steps
    assert "stopped unsaved" not in out.getvalue()


def first_term(backend: ScriptedBackend, name: str) -> float:
    """When ``name`` was first stopped (its first SIGTERM)."""
    handle = backend.handles[name][0]
    return handle.signal_times[handle.signals.index(signal.SIGTERM)]


def status(result: JobResult, name: str) -> str:
    return next(t.words() for t in result.tasks if t.name == name)


def ckpt(step: int) -> Checkpoint:
    return Checkpoint(f"model.ckpt-{step}", f"/m/model.ckpt-{step}", step, "estimator", 1, step)


def test_the_verdict_names_the_steps_trained_and_lost_and_the_change_that_keeps_them():
    record = {"saved": False, "step_reached": 10113, "outcome": "chief:0 did not answer"}
    result = JobResult(0, "training finished and every task ended", [], 400.0, True,
                       save_request=record)
    closing = Closing(ckpt(693), 893)
    short = verdict(result, closing)
    assert short is not None and short.startswith(
        "training was ended by the launcher, but the newest complete checkpoint "
        "model.ckpt-693 is short of max_steps 893")
    assert short.endswith(": 9420 steps trained since the checkpoint at step 693 were "
                          "lost: step 10113 was reached")
    (line,) = [line for line in closing_lines(result, closing)
               if line.startswith("not saved at max_steps: 9420 steps trained")]
    assert "(the save request: chief:0 did not answer)" in line
    assert "TFCLUSTER_MAX_STEPS" in line and "requested()" in line


def test_the_closing_line_says_what_saved_the_final_checkpoint():
    record = {"saved": True, "step_reached": 913, "outcome": "checkpoint at step 905 ..."}
    result = JobResult(0, "training finished and every task ended", [], 30.0, True,
                       save_request=record)
    closing = Closing(ckpt(905), 893)
    assert verdict(result, closing) is None and unsaved_words(record, 905) is None
    assert closing_lines(result, closing)[0] == \
        "final checkpoint model.ckpt-905, 12 steps past max_steps 893 (saved on request at " \
        "max_steps)"


@pytest.mark.parametrize("step, final, since, due", [
    (None, None, None, False),
    (599, 300, None, False),        # short of max_steps
    (700, 600, None, False),        # a checkpoint covers it
    (602, 300, 0.5, False),         # at max_steps, not moving past it: it may stop there
    (602, 300, END_GRACE - 1, False),   # ... saving slowly (Keras' last epoch, under load)
    (602, 300, END_GRACE, True),    # ... but it stayed unsaved
    (700, 300, 0.0, True),          # moving past max_steps: at once
    (700, None, 0.0, True),         # no checkpoint at all
])
def test_the_request_is_due_when_the_step_passed_max_steps_unsaved(step, final, since, due):
    view = TrainingView(MAX_STEPS, latest_step=step, final_step=final)
    assert save_due(view, step, 2, since) is due


class SyncModel(Model):
    """MultiWorkerMirroredStrategy with PreemptionCheckpointHandler: worker:0 saves the
    step it was at SAVE_TAKES s after the first SIGTERM (``handler``; False: no handler,
    SIGTERM swallowed, nothing saves)."""

    def __init__(self, backend: ScriptedBackend, handler: bool = True):
        super().__init__(backend, takes=None)
        self.handler = handler

    def saved(self) -> int:
        worker = (self.backend.handles.get("worker:0") or [None])[0]
        got = worker.signalled_at if worker is not None else None
        if self.handler and got is not None and self.backend.clock() >= got + SAVE_TAKES:
            return int(RATE * got)
        return PERIODIC


def run_sync(backend: ScriptedBackend, model: Model, tmp_path):
    return run_job({"cluster": {"worker": 2}, "max_steps": MAX_STEPS, "timeouts": TIMEOUTS},
                   backend, tmp_path, monitors=[model], training=model.view)


def test_mwms_trainers_get_sigterm_and_the_handlers_exit_is_a_stop_on_request(tmp_path):
    handler = Script(term_takes=SAVE_TAKES + 0.3, term_status=42)    # saves, exits 42
    backend = ScriptedBackend({"worker:0": [handler], "worker:1": [handler]})
    result, out = run_sync(backend, SyncModel(backend), tmp_path)
    assert result.status == 0, out.getvalue()
    for name in ("worker:0", "worker:1"):
        assert backend.handles[name][0].signals[0] == signal.SIGTERM
    asked = first_signal(backend, "worker:0")
    assert MAX_STEPS / RATE <= asked < MAX_STEPS / RATE + 0.2
    record = result.save_request
    assert record["saved"] and record["notified"] == ["worker:0", "worker:1"]
    assert "SIGTERM to every trainer, for PreemptionCheckpointHandler" in out.getvalue()
    assert not any("still moving" in line for line in out.lines)    # not stopped as runaways


def test_mwms_trainers_without_a_handler_are_said_and_waited_for(tmp_path):
    swallows = Script(ignores_term=True)      # TF's coordination service takes SIGTERM
    backend = ScriptedBackend({"worker:0": [swallows], "worker:1": [swallows]})
    result, out = run_sync(backend, SyncModel(backend, handler=False), tmp_path)
    assert "worker:0, worker:1 did not answer the notice within 10s" in out.getvalue()
    assert "cannot save on request" in out.getvalue()
    assert "stopping worker:0, worker:1: still at work 120s after training was done " \
           "(timeouts.save)" in out.getvalue()
    assert result.save_request is not None and not result.save_request["saved"]
