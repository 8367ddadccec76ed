"""A failure the launcher handles (a restarted task, a tolerated exit, a task it stopped)
is folded into at most 3 console lines: what happened, the exception and the user's frame,
and where the whole traceback is; a failure that ends the job is printed as it came, with
the failure tail. Empty task lines are dropped. The job loop runs over the scripted
in-memory backend (milliseconds); the console's hold is tested with a fake clock."""

from __future__ import annotations

import io
import signal

import pytest
from scripted_backend import Script, ScriptedBackend, run_job
from support import FakeClock

from launcher.output.console import HOLD, Console

pytestmark = pytest.mark.usefixtures("scripted_backend")

FRAMES = [line for i in range(30) for line in
          (f'  File "/venv/lib/python3.11/site-packages/tf/f{i}.py", line {i}, in f{i}',
           f"    f{i + 1}()")]
VANISHED = (["WARNING:tensorflow:Estimator is not trained yet.",
             "Traceback (most recent call last):",
             '  File "/job/train.py", line 60, in main', "    tf.estimator.train_and_evaluate("]
            + FRAMES +
            ["ValueError: The passed save_path is not a valid checkpoint: /m/model.ckpt-120"])


class Model:
    """The coordinator's stand-in: training is done at 5 s, the evaluator evaluated the
    final checkpoint at 12 s."""

    def __init__(self, clock):
        self.clock = clock

    def tick(self, tasks):
        from orchestrator.decisions import FINISH, Decision

        return Decision(FINISH, "checkpoint model.ckpt-600 reached max_steps 600") \
            if self.clock() >= 5 else None

    def close(self):
        pass


def evaluated(clock):
    from launcher.ending import TrainingView

    def view():
        done = clock() >= 12
        return TrainingView(max_steps=600, latest_step=600, final_step=600,
                            evaluated_step=600 if done else None)
    return view


def run(tmp_path, evaluator_scripts):
    everyone = {n: [Script(exit_at=5)] for n in ("chief:0", "worker:0")}
    backend = ScriptedBackend(dict(everyone, **{"evaluator:0": evaluator_scripts}))
    return run_job({"cluster": {"chief": 1, "worker": 1}, "evaluator": "localhost",
                    "max_steps": 600, "timeouts": {"finish": 30, "evaluator": 300, "kill": 3}},
                   backend, tmp_path, monitors=[Model(backend.clock)],
                   training=evaluated(backend.clock))


def test_a_restarted_evaluator_s_traceback_is_three_lines(tmp_path):
    result, out = run(tmp_path, [Script(exit_at=3, status=1, lines=VANISHED),
                                 Script(exit_at=14)])
    assert result.status == 0, out.getvalue()
    about = [line for line in out.lines if "evaluator:0" in line or "traceback" in line]
    failure = [line for line in about if "tfcluster: " in line and "restart" in line
               or "save_path" in line or "not shown" in line]
    assert failure == [
        "tfcluster: evaluator:0 failed with exit status 1 (the checkpoint it read was deleted "
        "under it: keep_checkpoint_max); restarting evaluator:0 in 1s (restart 1 of 3)",
        "tfcluster: evaluator:0: ValueError: The passed save_path is not a valid checkpoint: "
        "/m/model.ckpt-120",
        f"tfcluster:   (not shown: traceback from line 2 of {tmp_path}/run/logs/evaluator-0.log"
        ", raised in /job/train.py, line 60, in main (innermost: f29.py, line 29, in f29))"]
    assert not [line for line in out.lines if line.startswith("[evaluator:0]  ")]
    assert "[evaluator:0] Traceback" not in out.getvalue()
    assert "[evaluator:0] WARNING:tensorflow:Estimator is not trained yet." in out.lines
    log = (tmp_path / "run" / "logs" / "evaluator-0.log").read_text()
    assert all(line in log for line in VANISHED)         # the whole traceback is there


def test_a_failure_that_ends_the_job_is_printed_as_it_came_with_the_tail(tmp_path):
    trace = VANISHED[1:4] + ["KeyError: 'label'"]
    result, out = run(tmp_path, [Script(exit_at=8, status=1, lines=trace)])
    assert result.status == 1
    assert [f"[evaluator:0] {line}" for line in trace] == \
        [line for line in out.lines if line.startswith("[evaluator:0]") and
         "WARNING" not in line]
    assert "tfcluster: evaluator:0: KeyError: 'label'" in out.lines
    assert any(line.startswith("tfcluster: last lines of evaluator:0") for line in out.lines)


def console(clock=None) -> tuple[Console, io.StringIO, io.StringIO]:
    out, err = io.StringIO(), io.StringIO()
    return Console(out, err, clock=clock or FakeClock()), out, err


def test_a_traceback_held_is_printed_as_it_came_or_folded():
    c, out, err = console()
    for line in VANISHED:
        c.task_line("evaluator:0", line)
    assert out.getvalue() == "[evaluator:0] WARNING:tensorflow:Estimator is not trained yet.\n"
    assert c.holds("evaluator:0")
    c.release("evaluator:0", ["evaluator:0 was restarted", "  (see its log)"])
    assert err.getvalue() == "tfcluster: evaluator:0 was restarted\ntfcluster:   (see its log)\n"
    assert out.getvalue().count("\n") == 1 and not c.holds("evaluator:0")
    c2, out2, _ = console()
    for line in VANISHED:
        c2.task_line("chief:0", line)
    c2.release("chief:0")
    assert out2.getvalue().splitlines() == [f"[chief:0] {line}" for line in VANISHED]


def test_a_live_task_s_traceback_is_held_at_most_hold_seconds():
    """An exception a task logged and went on from: its lines come with its next line."""
    clock = FakeClock()
    c, out, _ = console(clock)
    c.task_line("chief:0", "Traceback (most recent call last):")
    c.task_line("chief:0", "KeyError: 'x'")
    clock.sleep(HOLD)
    c.task_line("chief:0", "step 5: training goes on")
    assert out.getvalue().splitlines() == ["[chief:0] Traceback (most recent call last):",
                                           "[chief:0] KeyError: 'x'",
                                           "[chief:0] step 5: training goes on"]


def test_held_lines_are_printed_at_close_and_a_quiet_console_holds_nothing():
    c, out, _ = console()
    c.task_line("chief:0", "Traceback (most recent call last):")
    c.close()
    assert out.getvalue() == "[chief:0] Traceback (most recent call last):\n"
    quiet = Console(io.StringIO(), io.StringIO(), quiet=True)
    quiet.task_line("chief:0", "Traceback (most recent call last):")
    assert not quiet.holds("chief:0")


@pytest.mark.parametrize("empty", ["", "   ", "\r", "\t"])
def test_an_empty_task_line_is_not_printed(empty):
    """TonY's runs: the blank line after each hidden deprecation notice."""
    c, out, _ = console()
    c.task_line("worker:0", "WARNING:tensorflow:From t.py:1: f (from x) is deprecated and "
                            "will be removed in a future version.")
    c.task_line("worker:0", "Instructions for updating:")
    c.task_line("worker:0", "Use g instead.")
    c.task_line("worker:0", empty)
    c.task_line("worker:0", "my print")
    assert out.getvalue() == "[worker:0] my print\n"


def test_ctrl_c_ignored_is_said_once_in_the_live_view():
    from launcher.output.live import LiveConsole

    previous = signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        screen = io.StringIO()
        live = LiveConsole(file=screen)
        live.info("started 2 tasks")
        live.info("progress")
        live.close()
    finally:
        signal.signal(signal.SIGINT, previous)
    assert screen.getvalue().count("Ctrl-C is ignored: this launcher was started with SIGINT "
                                   "ignored") == 1
    screen = io.StringIO()
    live = LiveConsole(file=screen)     # SIGINT handled: nothing to say
    live.info("started 2 tasks")
    live.close()
    assert "Ctrl-C" not in screen.getvalue()
