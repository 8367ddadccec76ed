"""Fixtures for every test: a check that no test leaves a process of a tfcluster job
behind. Helpers are in support.py."""

from __future__ import annotations

import signal

import psutil
import pytest
from support import wait_gone

# A session started in the background (`cmd &` in a script, nohup, CI runners) inherits
# SIGINT and SIGHUP ignored, and so would every `launch` and shell it starts (`launch` keeps
# an inherited SIG_IGN: launcher/signals.py). The tests press Ctrl-C and close terminals as
# a user does: the session answers Ctrl-C, still ignores a hangup itself, and its children
# start with both at their defaults (a handler, unlike SIG_IGN, is not inherited).
if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
    signal.signal(signal.SIGINT, signal.default_int_handler)
if signal.getsignal(signal.SIGHUP) is signal.SIG_IGN:
    signal.signal(signal.SIGHUP, lambda *_: None)


@pytest.fixture(autouse=True)
def no_leftover_tasks():
    """Fails the test when a task of a tfcluster job outlives it (and then kills it)."""
    yield
    left = wait_gone(timeout=10.0)
    if left:
        desc = []
        for p in left:
            try:
                desc.append(f"{p.pid} {p.environ().get('TFCLUSTER_TASK')} {p.cmdline()[:3]}")
                p.kill()
            except psutil.NoSuchProcess:
                pass
        pytest.fail("processes left running after the test: " + "; ".join(desc))


@pytest.fixture
def scripted_backend():
    """``"backend": "scripted"`` (tests/scripted_backend.py) is registered while it runs."""
    from scripted_backend import scripted_registered

    with scripted_registered():
        yield


@pytest.fixture
def runs(tmp_path, monkeypatch) -> dict[str, str]:
    """A run root of the test's own (TFCLUSTER_RUNS), for `launch` and for every command
    after it (`status`, `logs`, `cancel`): detached runs never land in the user's home."""
    monkeypatch.setenv("TFCLUSTER_RUNS", str(tmp_path / "runs"))
    return {"TFCLUSTER_RUNS": str(tmp_path / "runs")}
