"""The end rules in the real job loop, over the scripted in-memory backend and a fake
clock (milliseconds each): runaway trainers, the evaluator followed to the final
checkpoint, an evaluator restarted after a vanished checkpoint, the exit status rule."""

from __future__ import annotations

import pytest
from scripted_backend import Script, ScriptedBackend, run_job

from launcher.ending import TrainingView
from orchestrator.decisions import FINISH, Decision

pytestmark = pytest.mark.usefixtures("scripted_backend")


CLUSTER = {"chief": 1, "worker": 2, "ps": 1}
TIMEOUTS = {"finish": 30, "evaluator": 300, "kill": 3, "poll": 1}
VANISHED = ["Traceback (most recent call last):", '  File "t.py", line 9, in <module>',
            "ValueError: The passed save_path is not a valid checkpoint: /m/model.ckpt-120"]


def status(result, name: str) -> str:
    return next(t.words() for t in result.tasks if t.name == name)


class Model:
    """A coordinator stand-in: says ``finish`` at ``reached``, and a training view in which
    the step moves ``rate`` steps/s past max_steps and the evaluator has evaluated
    ``evaluated`` from ``evaluated_at`` on."""

    def __init__(self, clock, reached=5.0, rate=0.0, evaluated_at=None, max_steps=600):
        self.clock, self.reached, self.rate = clock, reached, rate
        self.evaluated_at, self.max_steps = evaluated_at, max_steps

    def tick(self, tasks):
        if self.clock() >= self.reached:
            return Decision(FINISH, f"checkpoint model.ckpt-{self.max_steps} reached "
                                    f"max_steps {self.max_steps}")
        return None

    def close(self):
        pass

    def view(self) -> TrainingView:
        now = self.clock()
        step = self.max_steps + int(self.rate * max(0.0, now - self.reached))
        saved = self.max_steps if now >= self.reached else None
        evaluated = self.max_steps if self.evaluated_at is not None and \
            now >= self.evaluated_at else None
        return TrainingView(self.max_steps, latest_step=step,
                            final_step=saved,
                            evaluated_step=evaluated)


def run(backend, model, tmp_path, **extra):
    doc = {"cluster": CLUSTER, "timeouts": TIMEOUTS, "max_steps": model.max_steps, **extra}
    return run_job(doc, backend, tmp_path, monitors=[model], training=model.view)


def test_trainers_past_max_steps_are_stopped_within_a_poll_whatever_the_evaluator(tmp_path):
    backend = ScriptedBackend({})                      # everything runs until stopped
    model = Model(backend.clock, reached=5.0, rate=300.0)
    result, out = run(backend, model, tmp_path, evaluator="localhost")
    text = out.getvalue()
    assert "stopping chief:0, worker:0, worker:1: step " in text
    assert "still moving: the script ignores max_steps" in text
    assert text.index("stopping chief:0") < text.index("stopping ps:0") < \
        text.index("stopping evaluator:0")
    assert status(result, "evaluator:0") == "stopped (SIGTERM)"     # it evaluated nothing
    assert 5 + TIMEOUTS["evaluator"] <= result.duration < 5 + TIMEOUTS["evaluator"] + 2
    assert result.status == 0


def test_runaway_trainers_stop_one_poll_after_max_steps(tmp_path):
    backend = ScriptedBackend({})
    result, _ = run(backend, Model(backend.clock, reached=5.0, rate=300.0), tmp_path)
    assert result.status == 0
    assert 5 <= result.duration < 5 + TIMEOUTS["poll"]
    assert all(status(result, n) == "stopped (SIGTERM)"
               for n in ("chief:0", "worker:0", "worker:1", "ps:0"))


def test_the_evaluator_is_stopped_once_it_evaluated_the_final_checkpoint(tmp_path):
    everyone = {n: [Script(exit_at=5)] for n in ("chief:0", "worker:0", "worker:1")}
    backend = ScriptedBackend(everyone)
    model = Model(backend.clock, reached=5.0, evaluated_at=40.0)    # quiet since its start
    result, out = run(backend, model, tmp_path, evaluator="localhost")
    assert result.status == 0
    assert "stopping evaluator:0: the final checkpoint (step 600) was evaluated (newest " \
           "evaluation: step 600)" in out.getvalue()
    assert 40 <= result.duration < 40.2           # not the 300 s window


def test_the_chief_s_own_evaluate_is_not_taken_for_the_evaluator_s(tmp_path):
    """TonY's example: the chief runs evaluate() after training (its output says so) and
    writes the eval events the evaluator would; the evaluator, asleep in its start delay,
    has evaluated nothing: it keeps its window instead of being stopped at once."""
    own = "INFO:tensorflow:Saving dict for global step 600: accuracy = 0.9, loss = 0.3"
    everyone = {n: [Script(exit_at=5)] for n in ("worker:0", "worker:1")}
    backend = ScriptedBackend(dict(everyone, **{"chief:0": [Script(exit_at=6, lines=[own])]}))
    model = Model(backend.clock, reached=5.0, evaluated_at=6.0)     # the chief's eval events
    result, out = run(backend, model, tmp_path, evaluator="localhost")
    assert "the final checkpoint (step 600) was evaluated" not in out.getvalue()
    assert "stopping evaluator:0: the evaluator did not evaluate the final checkpoint within " \
           "300s (timeouts.evaluator)" in out.getvalue()


def test_the_evaluator_s_own_announcement_counts_when_the_chief_evaluates_too(tmp_path):
    own = "INFO:tensorflow:Saving dict for global step 600: accuracy = 0.9, loss = 0.3"
    everyone = {n: [Script(exit_at=5)] for n in ("worker:0", "worker:1")}
    backend = ScriptedBackend(dict(everyone, **{"chief:0": [Script(exit_at=6, lines=[own])],
                                                "evaluator:0": [Script(lines=[own])]}))
    model = Model(backend.clock, reached=5.0, evaluated_at=6.0)
    result, out = run(backend, model, tmp_path, evaluator="localhost")
    assert "stopping evaluator:0: the final checkpoint (step 600) was evaluated" in \
        out.getvalue()
    assert result.duration < 6 + 40                   # idle after 30 s quiet, not 300 s


def test_an_evaluator_whose_checkpoint_vanished_is_restarted_and_evaluates(tmp_path):
    everyone = {n: [Script(exit_at=5)] for n in ("chief:0", "worker:0", "worker:1")}
    backend = ScriptedBackend(dict(everyone, **{
        "evaluator:0": [Script(exit_at=3, status=1, lines=VANISHED), Script(exit_at=9)]}))
    model = Model(backend.clock, reached=5.0, evaluated_at=12.0)
    result, out = run(backend, model, tmp_path, evaluator="localhost")
    assert result.status == 0, out.getvalue()
    assert "(the checkpoint it read was deleted under it: keep_checkpoint_max); restarting " \
           "evaluator:0" in out.getvalue()
    assert [n for _, n in backend.starts].count("evaluator:0") == 2
    assert [i["tasks"] for i in result.incidents] == [["evaluator:0"]]


def test_an_evaluator_that_fails_after_training_fails_the_job_saying_so(tmp_path):
    everyone = {n: [Script(exit_at=5)] for n in ("chief:0", "worker:0", "worker:1")}
    trace = VANISHED[:2] + ["KeyError: 'label'"]
    backend = ScriptedBackend(dict(everyone, **{
        "evaluator:0": [Script(exit_at=8, status=1, lines=trace)]}))
    result, out = run(backend, Model(backend.clock, reached=5.0), tmp_path,
                      evaluator="localhost")
    assert result.status == 1 and result.training_finished
    assert result.reason.startswith("training finished, but the evaluator failed: "
                                    "evaluator:0 failed with exit status 1")
    assert "evaluator:0: KeyError: 'label'" in out.getvalue()


def test_a_cluster_restart_is_one_incident_naming_every_task_it_restarted(tmp_path):
    backend = ScriptedBackend({"ps:0": [Script(exit_at=2, status=-9), Script()],
                               "chief:0": [Script(), Script(exit_at=3)],
                               "worker:0": [Script(), Script(exit_at=3)],
                               "worker:1": [Script(exit_at=1, status=-9), Script(),
                                            Script(exit_at=3)]})
    result, _ = run_job({"cluster": CLUSTER, "timeouts": TIMEOUTS}, backend, tmp_path)
    assert result.status == 0
    assert [(i["cause"], i["tasks"]) for i in result.incidents] == [
        ("worker:1", ["worker:1"]),
        ("ps:0", ["ps:0", "chief:0", "worker:0", "worker:1"])]


def test_trainers_that_printed_are_not_taken_for_restarts(tmp_path):
    chatty = [Script(lines=["INFO:tensorflow:loss = 0.6, step = 700"])]
    backend = ScriptedBackend({"chief:0": chatty, "worker:0": chatty, "worker:1": chatty})
    result, _ = run(backend, Model(backend.clock, reached=5.0, rate=300.0), tmp_path)
    assert result.status == 0 and 5 <= result.duration < 5 + TIMEOUTS["poll"]


def test_a_task_dying_of_its_own_error_as_another_fails_keeps_its_own_status(tmp_path):
    """worker:1 printed its traceback and is still tearing down when worker:0's failure
    stops the job: it gets a moment, and is reported with its own exit status."""
    trace = ["Traceback (most recent call last):", '  File "t.py", line 2, in <module>',
             "RuntimeError: worker:1 broke too"]
    backend = ScriptedBackend({
        "worker:0": [Script(exit_at=1.5, status=1, lines=VANISHED[:2] + ["KeyError: 'x'"])],
        "worker:1": [Script(exit_at=2.2, status=1, lines=trace)]})
    result, _ = run_job({"cluster": CLUSTER, "timeouts": TIMEOUTS}, backend, tmp_path)
    assert result.status == 1 and "worker:0 failed" in result.reason
    assert status(result, "worker:1") == "1"
    assert status(result, "chief:0") == "stopped (SIGTERM)"
