"""The job loop's rules, run on the real Job over a scripted in-memory backend and a fake
clock: each test takes milliseconds. The real-process tests (tests/local, tests/faults)
are the integration layer above these."""

from __future__ import annotations

import signal

import pytest
from scripted_backend import Lines, Script, ScriptedBackend, run_job, scripted_plan

from launcher.ending import WORKER_GRACE
from launcher.job import Job, PortConflict
from launcher.monitors import Watch
from launcher.output.console import Console
from launcher.tasks import Pace

pytestmark = pytest.mark.usefixtures("scripted_backend")


CLUSTER = {"chief": 1, "worker": 2, "ps": 1}
TIMEOUTS = {"finish": 10, "evaluator": 40, "kill": 3, "poll": 1}


def spec(**extra) -> dict:
    return {"cluster": CLUSTER, "timeouts": TIMEOUTS, **extra}


def status(result, name: str) -> str:
    return next(t.words() for t in result.tasks if t.name == name)


def test_tasks_start_ps_first_and_evaluator_last(tmp_path):
    backend = ScriptedBackend({"chief:0": [Script(exit_at=1)], "worker:0": [Script(exit_at=1)],
                               "worker:1": [Script(exit_at=1)], "evaluator:0": [Script(exit_at=2)]})
    result, _ = run_job(spec(evaluator="localhost"), backend, tmp_path)
    assert [name for _, name in backend.starts] == ["ps:0", "chief:0", "worker:0", "worker:1",
                                                   "evaluator:0"]
    assert result.status == 0


def test_chief_success_ends_the_job_and_stops_the_ps(tmp_path):
    """Asynchronous training (a ps): only the chief saves, so once it exited 0 the workers
    add nothing; past Estimator's start delay they get WORKER_GRACE to end with it, then the
    ps is stopped."""
    backend = ScriptedBackend({"chief:0": [Script(exit_at=70)], "worker:0": [Script(exit_at=99)],
                               "worker:1": [Script(exit_at=70 + WORKER_GRACE - 1)]})
    result, out = run_job(spec(), backend, tmp_path)
    assert result.status == 0 and result.reason == "training finished and every task ended"
    assert [status(result, n) for n in ("chief:0", "worker:0", "worker:1", "ps:0")] == \
        ["0", "stopped (SIGTERM)", "0", "stopped (SIGTERM)"]
    assert backend.handles["ps:0"][0].signals == [signal.SIGTERM]
    assert "chief:0 finished; waiting for ps:0, worker:0, worker:1 to end" in out.getvalue()
    assert "stopping worker:0: chief:0 exited 0 (no checkpoint in model_dir)" in out.getvalue()
    assert 70 + WORKER_GRACE <= result.duration < 70 + WORKER_GRACE + 0.4


def test_workers_still_in_estimators_start_delay_are_stopped_a_poll_after_the_chief(tmp_path):
    """A short job: the chief is done before the workers woke from tf.estimator's start
    delay (worker i sleeps 5*(i+1) s); waking, they would only find max_steps reached."""
    backend = ScriptedBackend({"chief:0": [Script(exit_at=3)], "worker:0": [Script(exit_at=6)],
                               "worker:1": [Script(exit_at=11)]})
    result, _ = run_job(spec(), backend, tmp_path)
    assert result.status == 0
    assert [status(result, n) for n in ("worker:0", "worker:1")] == ["stopped (SIGTERM)"] * 2
    assert 3 + TIMEOUTS["poll"] <= result.duration < 3 + TIMEOUTS["poll"] + 0.4


def test_synchronous_trainers_end_together_and_get_the_finish_window(tmp_path):
    backend = ScriptedBackend({"chief:0": [Script(exit_at=3)], "worker:0": [Script(exit_at=5)],
                               "worker:1": [Script(exit_at=4)]})
    result, _ = run_job(spec(cluster={"chief": 1, "worker": 2}), backend, tmp_path)
    assert [status(result, n) for n in ("chief:0", "worker:0", "worker:1")] == ["0"] * 3
    assert 5 <= result.duration < 5.2


def test_a_worker_that_keeps_going_is_stopped_after_the_finish_window(tmp_path):
    backend = ScriptedBackend({"chief:0": [Script(exit_at=3)], "worker:0": [Script(exit_at=4)]})
    result, _ = run_job(spec(cluster={"chief": 1, "worker": 2}), backend, tmp_path)
    assert result.status == 0
    assert status(result, "worker:1") == "stopped (SIGTERM)"
    assert 3 + TIMEOUTS["finish"] <= result.duration < 3 + TIMEOUTS["finish"] + 0.2


def test_the_evaluator_gets_its_own_window_then_is_stopped(tmp_path):
    everyone = {n: [Script(exit_at=2)] for n in ("chief:0", "worker:0", "worker:1")}
    backend = ScriptedBackend(everyone)
    result, _ = run_job(spec(evaluator="localhost"), backend, tmp_path)
    assert status(result, "evaluator:0") == "stopped (SIGTERM)"
    assert 2 + TIMEOUTS["evaluator"] <= result.duration < 2 + TIMEOUTS["evaluator"] + 0.2

    finishes = ScriptedBackend(dict(everyone, **{"evaluator:0": [Script(exit_at=7)]}))
    result, _ = run_job(spec(evaluator="localhost"), finishes, tmp_path / "b")
    assert status(result, "evaluator:0") == "0" and 7 <= result.duration < 7.2


def test_a_task_that_ignores_sigterm_gets_sigkill_after_the_kill_timeout(tmp_path):
    backend = ScriptedBackend({"chief:0": [Script(exit_at=1)], "worker:0": [Script(exit_at=1)],
                               "worker:1": [Script(exit_at=1)],
                               "ps:0": [Script(ignores_term=True)]})
    result, _ = run_job(spec(), backend, tmp_path)
    assert result.status == 0
    assert backend.handles["ps:0"][0].signals == [signal.SIGTERM, signal.SIGKILL]
    assert status(result, "ps:0") == "stopped (SIGKILL)"
    assert 1 + TIMEOUTS["kill"] <= result.duration < 1 + TIMEOUTS["kill"] + 0.2


def test_a_lost_ps_restarts_the_whole_cluster_after_the_backoff(tmp_path):
    backend = ScriptedBackend({"ps:0": [Script(exit_at=2, status=-9), Script()],
                               "chief:0": [Script(), Script(exit_at=3)],
                               "worker:0": [Script(), Script(exit_at=3)],
                               "worker:1": [Script(), Script(exit_at=3)]})
    result, out = run_job(spec(restart={"ps": {"policy": "on-failure", "max_restarts": 1,
                                               "backoff": 4}}), backend, tmp_path)
    assert result.status == 0, out.getvalue()
    names = [n for _, n in backend.starts]
    assert names == ["ps:0", "chief:0", "worker:0", "worker:1"] * 2
    restarted_at = [t for t, _ in backend.starts[4:]]
    assert all(2 + 4 <= t < 2 + 4.2 for t in restarted_at)      # backoff 4 s
    assert "ps:0 was killed by SIGKILL; restarting the whole cluster from the newest " \
           "checkpoint in 4s (restart 1 of 1)" in out.getvalue()
    assert [t.restarts for t in result.tasks] == [1, 1, 1, 1]


def test_a_worker_killed_by_a_signal_is_restarted_alone(tmp_path):
    backend = ScriptedBackend({"worker:1": [Script(exit_at=2, status=-9), Script(exit_at=2)],
                               "chief:0": [Script(exit_at=6)], "worker:0": [Script(exit_at=6)]})
    result, _ = run_job(spec(), backend, tmp_path)
    assert result.status == 0
    assert [n for _, n in backend.starts].count("worker:1") == 2
    assert [n for _, n in backend.starts].count("chief:0") == 1


def test_an_error_in_the_users_code_fails_the_job_with_its_last_lines(tmp_path):
    trace = ["Traceback (most recent call last):", '  File "train.py", line 3',
             "ValueError: bad feature column"]
    backend = ScriptedBackend({"worker:0": [Script(exit_at=2, status=1, lines=trace)]})
    result, out = run_job(spec(), backend, tmp_path)
    assert result.status == 1
    assert "worker:0 failed with exit status 1; not retried" in result.reason
    assert "  | ValueError: bad feature column" in out.getvalue()
    assert all(status(result, n).startswith("stopped") for n in ("chief:0", "worker:1", "ps:0"))


def test_a_bind_error_on_an_automatic_port_asks_for_a_new_plan(tmp_path):
    bind = ["E0000 server.cc: Failed to add port to server: Address already in use"]
    backend = ScriptedBackend({"ps:0": [Script(exit_at=1, status=1, lines=bind)]})
    with pytest.raises(PortConflict, match="ps:0 could not bind port"):
        run_job(spec(), backend, tmp_path)
    assert all(h[-1].poll() is not None for h in backend.handles.values())   # all stopped


class Says:
    """A monitor that answers ``decision`` once, at ``at`` seconds of the job."""

    def __init__(self, clock, at: float, decision):
        self.clock, self.at, self.decision, self.said = clock, at, decision, False
        self.seen: list = []

    def tick(self, tasks):
        self.seen.append(tasks)
        if not self.said and self.clock() >= self.at:
            self.said = True
            return self.decision
        return None

    def close(self):
        pass


def test_a_monitor_finish_gives_the_trainers_their_window(tmp_path):
    from orchestrator.decisions import FINISH, Decision

    backend = ScriptedBackend({})          # every task runs until stopped
    finish = Decision(FINISH, "checkpoint model.ckpt-100 reached max_steps 100")
    says = Says(backend.clock, 5, finish)
    result, out = run_job(spec(), backend, tmp_path, monitors=[says])
    assert result.status == 0
    assert "checkpoint model.ckpt-100 reached max_steps 100" in out.getvalue()
    assert 5 + TIMEOUTS["finish"] <= result.duration < 5 + TIMEOUTS["finish"] + 0.2
    assert {t.name for t in says.seen[0]} == {"ps:0", "chief:0", "worker:0", "worker:1"}


def test_a_task_a_monitor_reports_lost_goes_through_its_restart_policy(tmp_path):
    from orchestrator.decisions import LOST, Decision

    backend = ScriptedBackend({"chief:0": [Script(exit_at=9)], "worker:0": [Script(exit_at=9)],
                               "worker:1": [Script(), Script(exit_at=1)]})
    lost = Decision(LOST, "worker:1 (localhost:30003) has not answered for 20 s", ("worker:1",))
    result, out = run_job(spec(), backend, tmp_path, monitors=[Says(backend.clock, 2, lost)])
    assert result.status == 0
    # lost: SIGKILL at once (a frozen process does not act on SIGTERM)
    assert backend.handles["worker:1"][0].signals == [signal.SIGKILL]
    assert "worker:1 (localhost:30003) has not answered for 20 s; restarting worker:1" \
        in out.getvalue()

    never = ScriptedBackend({})
    result, _ = run_job(spec(restart={"worker": {"policy": "never"}}), never, tmp_path / "b",
                        monitors=[Says(never.clock, 2, lost)])
    assert result.status == 1 and "restart policy of worker is never" in result.reason


def test_a_chief_alone_is_not_said_to_wait_for_others(tmp_path):
    backend = ScriptedBackend({"chief:0": [Script(exit_at=5)]})
    result, out = run_job(spec(cluster={"chief": 1}, strategy="estimator"), backend, tmp_path)
    assert result.status == 0
    assert "chief:0 finished\n" in out.getvalue() and "waiting for" not in out.getvalue()


def test_a_monitor_answering_a_restart_policys_word_is_the_launchers_own_failure(tmp_path):
    """Monitors say finish, fail or lost; ``restart`` is the restart policies' word: a
    monitor that says it is a bug in tfcluster, said in one line, every task stopped."""
    from orchestrator.decisions import RESTART, Decision

    backend = ScriptedBackend({})          # every task runs until stopped
    wrong = Decision(RESTART, "worker:1 again", ("worker:1",))
    result, out = run_job(spec(), backend, tmp_path, monitors=[Says(backend.clock, 2, wrong)])
    assert result.status == 1
    assert result.reason.startswith("launcher error (a bug in tfcluster, not in the job): "
                                    "ValueError: a monitor answered restart")
    assert not any(t.running for t in result.tasks)
    assert (tmp_path / "run" / "launcher-error.txt").exists()


def test_monitors_built_once_the_tasks_started_are_ticked_from_then_on(tmp_path):
    """The caller's ``watch`` (launcher/api.py's) is called once, when no task is starting
    any more; its monitors, readiness and model_dir view are the loop's from then on."""
    from orchestrator.decisions import FINISH, Decision

    backend = ScriptedBackend({})
    finish = Decision(FINISH, "checkpoint model.ckpt-100 reached max_steps 100")
    says = Says(backend.clock, 5, finish)
    built = []

    def watch() -> Watch:
        built.append(len(backend.starts))
        return Watch([says])

    out = Lines()
    job = Job(scripted_plan(spec(), backend, tmp_path), backend, str(tmp_path / "run"),
              Console(out, out), watch, pace=Pace(backend.clock, backend.wait))
    result = job.run()
    assert built == [4]                     # once, after the 4 tasks' starts
    assert result.status == 0 and finish.reason in out.getvalue()
    assert {t.name for t in says.seen[0]} == {"ps:0", "chief:0", "worker:0", "worker:1"}
