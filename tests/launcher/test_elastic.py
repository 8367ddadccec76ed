"""Elastic workers (``roles.worker.minimum``) on the real job loop over the scripted backend
and a fake clock: a worker that cannot come back no longer ends an asynchronous job while
the minimum holds; the console names it and the shard no one reads; a worker whose host
answers again is started again. The real TensorFlow run is tests/faults/test_elastic_pss.py."""

from __future__ import annotations

import json

import pytest
from scripted_backend import Script, ScriptedBackend, run_job

from launcher.api import parse_spec
from launcher.errors import SpecError
from launcher.restarts import RestartBook
from orchestrator.decisions import DROP, FAIL, IGNORE
from orchestrator.policies import RestartPolicy

pytestmark = pytest.mark.usefixtures("scripted_backend")

TIMEOUTS = {"finish": 10, "evaluator": 40, "kill": 3, "poll": 1}
KILLED = Script(exit_at=5, status=-9)        # kill -9, 5 s after each start
ONE_RESTART = {"worker": {"policy": "on-failure", "max_restarts": 1, "backoff": 1}}


def spec(minimum: int | None, strategy: str = "parameter_server", **extra) -> dict:
    doc = {"cluster": {"chief": 1, "worker": 2, "ps": 1}, "strategy": strategy,
           "timeouts": TIMEOUTS, "restart": ONE_RESTART, **extra}
    if minimum is not None:
        doc["roles"] = {"worker": {"minimum": minimum}}
    return doc


def said(out) -> list[str]:
    """The launcher's console lines, without their ``tfcluster: `` mark."""
    return [line.removeprefix("tfcluster: ") for line in out.lines]


def starts_of(backend: ScriptedBackend, name: str) -> int:
    return sum(1 for _, started in backend.starts if started == name)


@pytest.mark.parametrize("strategy, shard", [("parameter_server", "shard 1 of 2"),
                                             ("estimator", "shard 2 of 3")])
def test_a_worker_whose_restarts_are_spent_is_dropped_while_the_minimum_holds(
        tmp_path, strategy, shard):
    """worker:1 dies twice (its one restart spent): the job goes on with worker:0 and ends
    when the chief exits 0 at max_steps; the console names worker:1 and its unread shard (a
    ParameterServerStrategy worker reads shard INDEX of the workers; an Estimator worker
    counts the chief as shard 0), the verdict says one worker fewer."""
    backend = ScriptedBackend({"chief:0": [Script(exit_at=60)], "worker:1": [KILLED, KILLED]})
    result, out = run_job(spec(1, strategy), backend, tmp_path)
    assert result.status == 0, result.reason
    assert result.reason == ("training finished with 1 worker fewer (worker:1 lost for good) "
                             "and every other task ended")
    assert (f"worker:1 was killed by SIGKILL; restart budget spent (1 of 1 restarts of "
            f"worker:1 used); going on with 1 of 2 workers (roles.worker.minimum 1); {shard} "
            f"of the training data (its TFCLUSTER_SHARD_INDEX) is read by no one now") \
        in said(out)
    assert starts_of(backend, "worker:1") == 2          # never started a third time
    (lost,) = result.lost
    assert lost["task"] == "worker:1" and lost["returned_at"] is None
    assert lost["shard"] == ([1, 2] if strategy == "parameter_server" else [2, 3])
    # its host answered the first question: nothing to wait for, not asked again
    assert [host for _, host in backend.probes] == ["localhost"]
    assert not any("does not answer" in line for line in said(out))


def test_the_minimum_broken_fails_the_job_as_without_one(tmp_path):
    """worker:0 is dropped (1 left, minimum 1); worker:1's restarts spent next would leave
    none: the job fails, saying why."""
    backend = ScriptedBackend({"chief:0": [Script(exit_at=60)],
                               "worker:0": [KILLED, KILLED],
                               "worker:1": [Script(exit_at=20, status=-9), KILLED]})
    result, out = run_job(spec(1), backend, tmp_path)
    assert result.status == 1
    assert result.reason == ("worker:1 was killed by SIGKILL; restart budget spent (1 of 1 "
                             "restarts of worker:1 used); 0 of 2 workers would be left, fewer "
                             "than roles.worker.minimum 1")
    assert any(line.startswith("worker:0 was killed by SIGKILL; restart budget spent")
               and "going on with 1 of 2 workers" in line for line in said(out))


def test_the_judge_drops_each_worker_once_and_counts_what_is_left():
    """A late loss reported for a worker already dropped changes nothing; the next worker's
    drop counts the first one out."""
    spent = RestartPolicy("on-failure", 0)
    book = RestartBook({"worker": spent, "chief": spent}, minimum={"worker": 1},
                       counts={"worker": 3, "chief": 1}, primary="chief:0")
    assert book.judge_lost("worker", "worker:2", "worker:2 is silent").action == DROP
    assert book.judge_lost("worker", "worker:2", "worker:2 is silent").action == IGNORE
    assert book.judge_lost("worker", "worker:1", "worker:1 is silent").action == DROP
    last = book.judge_lost("worker", "worker:0", "worker:0 is silent")
    assert last.action == FAIL and "0 of 3 workers would be left" in last.reason
    assert book.judge_lost("chief", "chief:0", "chief:0 is silent").action == FAIL
    # without a chief, worker 0 is the primary task: it saves, it is never dropped
    book = RestartBook({"worker": spent}, minimum={"worker": 0}, counts={"worker": 2},
                       primary="worker:0")
    assert book.judge_lost("worker", "worker:0", "worker:0 is silent").action == FAIL
    assert book.judge_lost("worker", "worker:1", "worker:1 is silent").action == DROP


def test_without_a_minimum_a_spent_worker_fails_the_job(tmp_path):
    backend = ScriptedBackend({"chief:0": [Script(exit_at=60)], "worker:1": [KILLED, KILLED]})
    result, _ = run_job(spec(None), backend, tmp_path)
    assert result.status == 1
    assert result.reason == ("worker:1 was killed by SIGKILL; restart budget spent (1 of 1 "
                             "restarts of worker:1 used)")
    assert result.lost == []


def test_a_worker_whose_host_returns_is_started_again(tmp_path):
    """worker:1's host h2 does not answer once it is lost, then answers: worker:1 starts
    again and the job ends with every worker."""
    backend = ScriptedBackend({"chief:0": [Script(exit_at=90)],
                               "worker:1": [KILLED, KILLED, Script()]},
                              answers={"h2": [False, False, True]})
    doc = spec(1, cluster={"chief": ["h0"], "worker": ["h1", "h2"], "ps": ["h3"]})
    result, out = run_job(doc, backend, tmp_path)
    assert result.status == 0, result.reason
    assert result.reason == "training finished and every task ended"
    assert "worker:1's host h2 does not answer: worker:1 is started again once it does" \
        in said(out)
    assert "worker:1's host h2 answers again: starting worker:1 again" in said(out)
    assert starts_of(backend, "worker:1") == 3
    (lost,) = result.lost
    assert lost["task"] == "worker:1" and lost["host"] == "h2"
    assert lost["returned_at"] is not None and lost["returned_at"] > lost["at"]


def test_a_cluster_restart_leaves_a_dropped_worker_out(tmp_path):
    """A lost ps restarts the cluster; the worker the job went on without stays down."""
    backend = ScriptedBackend({"chief:0": [Script(), Script(exit_at=30)],
                               "worker:1": [KILLED, KILLED],
                               "ps:0": [Script(exit_at=30, status=-9), Script()]})
    result, _ = run_job(spec(1, restart={**ONE_RESTART, "ps": "on-failure"}), backend,
                        tmp_path)
    assert result.status == 0, result.reason
    assert starts_of(backend, "worker:1") == 2 and starts_of(backend, "worker:0") == 2
    assert "1 worker fewer (worker:1 lost for good)" in result.reason


@pytest.mark.parametrize("doc, message", [
    ({"cluster": {"chief": 1, "worker": 2}, "roles": {"worker": {"minimum": 1}}},
     "roles.worker.minimum: multi_worker_mirrored is synchronous: every worker takes part in "
     "every step, so the job cannot go on with fewer (a minimum needs parameter_server, or "
     "estimator with a ps)"),
    ({"cluster": {"chief": 1, "worker": 2, "ps": 1}, "roles": {"worker": {"minimum": 3}}},
     "roles.worker.minimum: 3 is more than the 2 worker tasks of cluster.worker"),
    ({"cluster": {"chief": 1, "worker": 2, "ps": 1}, "roles": {"worker": {"minimum": -1}}},
     "roles.worker.minimum: must be at least 0, got -1"),
])
def test_a_bad_minimum_is_refused(doc, message):
    with pytest.raises(SpecError) as refused:
        parse_spec(json.dumps({"command": ["x"], "model_dir": "m", **doc}))
    assert str(refused.value) == message
