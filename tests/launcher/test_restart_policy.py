"""The restart decisions (launcher/restarts.py) on their own: which exit is a kill, which is
a code error, what each policy does, the budget, the back-off and the scope per role."""

from __future__ import annotations

import signal

import pytest

from launcher.api import parse_spec
from launcher.restarts import ERROR, OK, SIGNAL, TRANSIENT, RestartBook, classify_exit
from orchestrator.policies import CLUSTER, TASK, RestartPolicy, backoff_delay, scope_for

TRACEBACK = ["Traceback (most recent call last):", '  File "train.py", line 3',
             "ValueError: bad feature column"]


@pytest.mark.parametrize("status, tail, kind", [
    (0, [], OK),
    (-signal.SIGKILL, [], SIGNAL),
    (-signal.SIGTERM, TRACEBACK, SIGNAL),
    (128 + signal.SIGKILL, [], SIGNAL),           # a shell wrapper reporting its child's kill
    (1, TRACEBACK, ERROR),
    (2, [], ERROR),
    (1, ["tensorflow.python.framework.errors_impl.UnavailableError: Socket closed"], TRANSIENT),
    (1, TRACEBACK + ["AbortedError: ps:0 restarted"], TRANSIENT),
    (255, ["ssh: connect to host 10.0.0.11 port 22: Connection timed out"], TRANSIENT),
])
def test_exit_kinds(status, tail, kind):
    assert classify_exit(status, tail)[0] == kind


def test_a_host_that_stopped_answering_ssh_is_a_loss_in_its_own_words():
    """The ssh backend ends the output of a task whose host stopped answering (ssh's
    keepalive gave up, exit status 255) with one line: retried like a kill, said as is."""
    tail = ["ready", "tfcluster: lost the ssh connection to 10.0.0.11 (Timeout, server "
                     "10.0.0.11 not responding.)"]
    assert classify_exit(255, tail, "worker") == (
        TRANSIENT, "lost the ssh connection to 10.0.0.11 (Timeout, server 10.0.0.11 not "
                   "responding.)")


def test_defaults_follow_tensorflows_rules():
    assert scope_for("worker", synchronous=False) == TASK
    assert scope_for("chief", synchronous=False) == TASK
    assert scope_for("evaluator", synchronous=False) == TASK
    assert scope_for("ps", synchronous=False) == CLUSTER
    assert scope_for("worker", synchronous=True) == CLUSTER   # every trainer in every all-reduce
    assert scope_for("evaluator", synchronous=True) == TASK
    book = RestartBook()
    for role in ("chief", "worker", "ps", "evaluator"):
        assert book.judge_exit(role, f"{role}:0", -9, [], False).action == "restart"


def test_a_lost_ps_restarts_the_whole_cluster():
    verdict = RestartBook().judge_exit("ps", "ps:0", -9, [], False)
    assert (verdict.action, verdict.scope, verdict.attempt) == ("restart", CLUSTER, 1)
    assert verdict.reason == ("ps:0 was killed by SIGKILL; restarting the whole cluster from the "
                              "newest checkpoint in 1s (restart 1 of 3)")


def test_a_code_error_is_not_retried_unless_the_policy_is_always():
    verdict = RestartBook().judge_exit("worker", "worker:1", 1, TRACEBACK, False)
    assert verdict.action == "fail"
    assert verdict.reason == ("worker:1 failed with exit status 1; not retried: an error in the "
                              "task's own code would repeat (restart policy 'always' retries it)")
    always = RestartBook({"worker": RestartPolicy("always", 1, 0.0)})
    assert always.judge_exit("worker", "worker:1", 1, TRACEBACK, False).action == "restart"
    assert always.judge_exit("worker", "worker:1", 1, TRACEBACK, False).reason == (
        "worker:1 failed with exit status 1; restart budget spent (1 of 1 restarts of worker:1 "
        "used)")


def test_budget_is_per_task_and_backoff_doubles():
    book = RestartBook({"worker": RestartPolicy("on-failure", 2, 0.5)})
    first = book.judge_exit("worker", "worker:0", -9, [], False)
    second = book.judge_exit("worker", "worker:0", -9, [], False)
    assert (first.delay, second.delay) == (0.5, 1.0)
    assert book.judge_exit("worker", "worker:1", -9, [], False).action == "restart"
    assert book.judge_exit("worker", "worker:0", -9, [], False).action == "fail"
    assert backoff_delay(1.0, 10) == 60.0


def test_never_fails_and_exit_after_the_end_is_ignored():
    book = RestartBook({"chief": RestartPolicy("never", 0, 1.0)})
    assert book.judge_exit("chief", "chief:0", -9, [], False).reason == (
        "chief:0 was killed by SIGKILL; restart policy of chief is never")
    assert book.judge_exit("worker", "worker:0", -15, [], True).action == "ignore"
    assert book.judge_exit("ps", "ps:0", -9, [], True).action == "ignore"
    assert book.judge_exit("evaluator", "evaluator:0", -9, [], True).action == "restart"


def test_a_ps_that_exits_0_early_fails_unless_always():
    assert RestartBook().judge_exit("ps", "ps:0", 0, [], False).reason == (
        "ps:0 exited before training ended")
    book = RestartBook({"ps": RestartPolicy("always", 3, 1.0)})
    assert book.judge_exit("ps", "ps:0", 0, [], False).action == "restart"
    assert book.judge_exit("worker", "worker:0", 0, [], False).action == "ignore"


def test_spec_restart_section_feeds_the_book():
    spec = parse_spec('{"cluster": {"worker": 2}, "model_dir": "m", '
                      '"restart": {"worker": {"policy": "always", "max_restarts": 5}, '
                      '"ps": "never"}}')
    book = RestartBook(spec.restart)
    assert book.policy_for("worker").max_restarts == 5
    assert book.policy_for("ps").policy == "never"
    assert book.policy_for("chief").policy == "on-failure"
