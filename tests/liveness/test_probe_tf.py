"""The gRPC probe against a real TensorFlow server (TF 2.15, what a ps runs): ready once it
listens, answers while alive, runs into its deadline while frozen (SIGSTOP), answers again
once continued, and fails at once when nothing listens. The cheap probe (an HTTP/2 PING,
launcher/monitors/ping.py) says the same at each step."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import time
from pathlib import Path

import psutil
import pytest
from support import PY_TF215

from launcher.backends.local import free_port
from launcher.monitors.liveness import GrpcProber
from launcher.monitors.ping import PingProber

SERVER = str(Path(__file__).with_name("jobs") / "tf_server.py")
pytestmark = [pytest.mark.tf]


def wait_status(pid: int, status: str, timeout: float = 10) -> None:
    deadline = time.monotonic() + timeout
    while psutil.Process(pid).status() != status and time.monotonic() < deadline:
        time.sleep(0.01)


@pytest.fixture
def tf_ps():
    address = f"localhost:{free_port()}"
    config = {"cluster": {"ps": [address], "worker": [f"localhost:{free_port()}"]},
              "task": {"type": "ps", "index": 0}}
    env = dict(os.environ, TF_CONFIG=json.dumps(config), TF_CPP_MIN_LOG_LEVEL="2",
               TFCLUSTER_RUN_ID="probe-test", TFCLUSTER_TASK="ps:0")
    proc = subprocess.Popen([PY_TF215, SERVER], env=env, stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL, start_new_session=True)
    try:
        yield address, proc
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()


def answers_again(ask, within: float = 10.0) -> bool:
    deadline = time.monotonic() + within
    while not ask().ok:
        if time.monotonic() > deadline:
            return False
        time.sleep(0.1)
    return True


def test_probe_follows_a_real_tf_server_through_start_freeze_and_death(tf_ps):
    address, proc = tf_ps
    prober = GrpcProber(deadline=1.0)
    pinger = PingProber(deadline=1.0)
    try:
        assert prober.ask(address).code == "UNAVAILABLE"     # still importing TensorFlow
        deadline = time.monotonic() + 60
        while not prober.ask(address).ok and time.monotonic() < deadline:
            time.sleep(0.1)
        live = prober.ask(address)
        assert live.ok and live.took < 1.0
        pinged = pinger.ask_all([address])[address]
        assert pinged.ok and pinged.took < 1.0
        os.killpg(proc.pid, signal.SIGSTOP)
        wait_status(proc.pid, psutil.STATUS_STOPPED)
        frozen = prober.ask(address)
        assert (frozen.ok, frozen.code) == (False, "DEADLINE_EXCEEDED")
        assert frozen.took >= 0.9
        frozen = pinger.ask_all([address])[address]
        assert (frozen.ok, frozen.code) == (False, "DEADLINE_EXCEEDED")
        os.killpg(proc.pid, signal.SIGCONT)
        # answers again once continued (a thawed server first works off what queued while
        # it was stopped: a call at once may still run into its deadline on a busy machine)
        assert answers_again(lambda: prober.ask(address)), prober.ask(address)
        assert answers_again(lambda: pinger.ask_all([address])[address])
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
        gone = prober.ask(address)
        assert (gone.ok, gone.code) == (False, "UNAVAILABLE")
        gone = pinger.ask_all([address])[address]
        assert (gone.ok, gone.code) == (False, "UNAVAILABLE")
    finally:
        prober.close()
