"""A cluster restart under MultiWorkerMirroredStrategy, every interleaving of the stop, the
reap and the back-off: one worker is SIGKILLed, the launcher stops its peer for the
cluster restart, and the peer takes its time to exit (TensorFlow answers SIGTERM with its
own ``UnavailableError ... Socket closed``). The peer's exit belongs to the attempt the
launcher stopped: it is never judged as the restarted attempt's exit, nor as the user's
error; the cluster restarts once and the job ends 0."""

from __future__ import annotations

import signal

import pytest
from scripted_backend import Script, ScriptedBackend, run_job

pytestmark = pytest.mark.usefixtures("scripted_backend")

KILL = 3.0          # timeouts.kill
KILLED_AT = 2.0     # worker:1 is SIGKILLed then
UNAVAILABLE = ["tensorflow.python.framework.errors_impl.UnavailableError: "
               "Socket closed"]
USER_ERROR = ["Traceback (most recent call last):", '  File "train.py", line 9',
              "ValueError: a line the user's code would print again"]


def mwms(backoff: float) -> dict:
    return {"cluster": {"worker": 2}, "strategy": "multi_worker_mirrored",
            "timeouts": {"kill": KILL, "poll": 1, "finish": 10},
            "restart": {"worker": {"policy": "on-failure", "max_restarts": 2,
                                   "backoff": backoff}}}


def peer(term_takes: float | None, term_status: int | None, lines: list[str]) -> Script:
    """worker:0's first attempt: trains until stopped; a SIGTERM takes ``term_takes`` s to
    end it (None: it ignores SIGTERM and is SIGKILLed after timeouts.kill)."""
    if term_takes is None:
        return Script(ignores_term=True)
    return Script(term_takes=term_takes, term_status=term_status, term_lines=lines)


# (term_takes, backoff): the peer exits within the back-off; after the back-off but within
# timeouts.kill (a race once seen); only at SIGKILL; with no back-off at all.
TIMINGS = [(0.4, 1.0), (1.4, 1.0), (None, 1.0), (1.4, 0.0), (0.0, 0.0), (2.9, 2.9)]
# how the stopped peer exits: killed by SIGTERM; TensorFlow's own error exit; an error
# exit that reads like the user's code (it must still not be judged: the launcher stopped it)
EXITS = [(None, []), (1, UNAVAILABLE), (1, USER_ERROR)]


@pytest.mark.parametrize("term_takes, backoff", TIMINGS)
@pytest.mark.parametrize("term_status, lines", EXITS, ids=["sigterm", "unavailable", "error"])
def test_the_stopped_peers_exit_belongs_to_the_old_attempt(tmp_path, term_takes, backoff,
                                                           term_status, lines):
    backend = ScriptedBackend({
        "worker:0": [peer(term_takes, term_status, lines), Script(exit_at=3)],
        "worker:1": [Script(exit_at=KILLED_AT, status=-signal.SIGKILL), Script(exit_at=3)]})
    result, out = run_job(mwms(backoff), backend, tmp_path)
    assert result.status == 0, (result.reason, out.getvalue())
    assert result.reason == "training finished and every task ended"
    assert [n for _, n in backend.starts] == ["worker:0", "worker:1"] * 2
    assert [i["cause"] for i in result.incidents] == ["worker:1"]     # one cluster restart
    assert [t.restarts for t in result.tasks] == [1, 1]
    assert [t.words() for t in result.tasks] == ["0", "0"]
    peer_gone = KILLED_AT + (KILL if term_takes is None else term_takes)
    restarted_at = [t for t, _ in backend.starts[2:]]
    assert all(t >= max(peer_gone, KILLED_AT + backoff) for t in restarted_at)
    assert "not retried" not in out.getvalue()


@pytest.mark.parametrize("backoff", [0.0, 1.0])
def test_a_peer_that_fails_with_its_killed_peer_is_covered_by_the_one_restart(tmp_path,
                                                                             backoff):
    """Both exits are reaped in one turn: the SIGKILLed worker and its peer, whose
    all-reduce broke (UnavailableError). One cluster restart, not two."""
    backend = ScriptedBackend({
        "worker:0": [Script(exit_at=KILLED_AT, status=1, lines=UNAVAILABLE), Script(exit_at=3)],
        "worker:1": [Script(exit_at=KILLED_AT, status=-signal.SIGKILL), Script(exit_at=3)]})
    result, out = run_job(mwms(backoff), backend, tmp_path)
    assert result.status == 0, (result.reason, out.getvalue())
    assert len(result.incidents) == 1
    assert [n for _, n in backend.starts] == ["worker:0", "worker:1"] * 2
