"""Following a run goes through the follower the registry names for the backend its
state.json names (launcher.backends.following): ``launch status`` asks that engine, and a
run whose backend is no longer registered is judged by its launcher alone. Which piece an
engine has, the registry says (launcher.backends.submitter for ``--detach``)."""

from __future__ import annotations

import pytest

from launcher.backends import following, register, unregister
from launcher.backends.base import Backend
from launcher.backends.engine import Follower
from launcher.commands.runs import current_state


class Held(Backend):
    """The attached piece of an engine that holds its runs."""

    name = "held"

    def allocate_port(self, host):
        return 2222

    def start(self, task):
        raise NotImplementedError


class HeldByEngine(Follower):
    """Its follower: the engine's job waits in a queue."""

    @classmethod
    def describe_handle(cls, handle):
        return f"held job {handle['job']}" if handle.get("job") else ""

    @classmethod
    def engine_state(cls, handle, recorded):
        return ("queued", f"held job {handle['job']} waits") if handle.get("job") else None


@pytest.fixture
def held():
    register("held", Held, follower=HeldByEngine)
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
    """The registry says what an engine has: the local backend has no follower, so its runs
    are the launcher's to judge; Slurm's are followed by the Slurm follower."""
    from launcher.backends.slurm_follow import SlurmFollower

    assert following("local") is Follower
    assert following("slurm") is SlurmFollower


def test_the_registry_names_each_engine_s_pieces():
    """Each engine's pieces, by caller: the attached backend runs the tasks; ``--detach``
    hands the job to a submitter where the engine has one (Slurm, Kubernetes' controllers),
    else keeps its launcher as a daemon; no backend class answers for the others."""
    from launcher.backends import backend_class, names, submitter
    from launcher.backends.engine import Submitter
    from launcher.backends.slurm_submit import SlurmSubmitter

    assert {"local", "ssh", "slurm", "kubernetes", "docker"} <= set(names())
    for name in names():
        cls = backend_class(name)
        assert issubclass(cls, Backend) and not issubclass(cls, (Follower, Submitter)), name
    assert isinstance(submitter(backend_class("slurm")()), SlurmSubmitter)
    assert submitter(backend_class("local")()) is None
    assert submitter(backend_class("docker")()) is None
    assert following("kubernetes") is not Follower and following("docker") is Follower
