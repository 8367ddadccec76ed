"""Following a run goes through the backend its state.json names (launcher.backends.
following): ``launch status`` asks that backend's engine, and a run whose backend is no
longer registered is judged by its launcher alone."""

from __future__ import annotations

import pytest

from launcher.backends import following, register, unregister
from launcher.backends.base import Backend
from launcher.backends.engine import Follower
from launcher.commands.runs import current_state


class HeldByEngine(Backend, Follower):
    """An engine that holds its runs: its job waits in a queue."""

    name = "held"

    def allocate_port(self, host):
        return 2222

    def start(self, task):
        raise NotImplementedError

    @classmethod
    def describe_handle(cls, handle):
        return f"held job {handle['job']}" if handle.get("job") else ""

    @classmethod
    def engine_state(cls, handle, recorded):
        return ("queued", f"held job {handle['job']} waits") if handle.get("job") else None


@pytest.fixture
def held():
    register("held", HeldByEngine)
    yield
    unregister("held")


def state_of(backend: str, handle: dict) -> dict:
    # A launcher on another host: only the engine can tell how the run is doing.
    return {"run_id": "r-1", "name": "r", "backend": backend, "state": "running",
            "handle": handle, "launcher": {"pid": 1, "host": "elsewhere"}}


def test_status_asks_the_engine_of_the_backend_the_run_names(held):
    assert following("held") is HeldByEngine
    assert current_state(state_of("held", {"job": "7"})) == ("queued", "held job 7 waits")
    assert following("held").describe_handle({"job": "7"}) == "held job 7"


def test_a_run_the_engine_does_not_hold_is_the_launcher_s_to_judge(held):
    assert current_state(state_of("held", {})) == ("running", None)


def test_a_backend_no_longer_registered_is_followed_by_its_launcher_alone():
    assert following("gone-plugin") is Follower
    assert current_state(state_of("gone-plugin", {"job": "7"})) == ("running", None)


def test_a_backend_no_engine_holds_runs_is_followed_by_its_launcher_alone():
    """The type says what a backend can do: the local backend is no Follower, so its runs
    are the launcher's to judge; Slurm's are followed by the Slurm backend."""
    from launcher.backends.slurm import SlurmBackend

    assert following("local") is Follower
    assert following("slurm") is SlurmBackend
