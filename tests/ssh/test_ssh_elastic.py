"""Elastic workers over real ssh: the host of a worker is cut off (its network namespace's
link brought down); the launcher loses the worker when ssh's keepalive gives up on the host
(no gRPC checks here: ``timeouts.unresponsive`` 0; a task that stops answering gRPC is lost
the same way, tests/ssh/test_ssh_partition.py), its restarts are spent (``max_restarts`` 0)
and, ``roles.worker.minimum`` holding, the job goes on, asking the host whether it answers.
Once the link is up again the host answers and the worker is started there again; the job
then ends 0 with every worker, nothing left on any host.

The tasks are stand-ins (tests/ssh/jobs/sleeper.py: the ps and worker:1 answer
TensorFlow's GetStatus through tests/fake_tf_server.py; the chief ends when the test says
so): this is the launcher's and the ssh backend's part. The same rule with TensorFlow's own
workers is tests/faults/test_elastic_pss.py (a worker killed for good, locally)."""

from __future__ import annotations

import json
import time

import pytest
from faults.harness import LaunchRun
from ssh_specs import write_spec
from support import PY_TF215, REPO
from test_ssh_partition import link

SLEEPER = str(REPO / "tests" / "ssh" / "jobs" / "sleeper.py")

pytestmark = pytest.mark.slow


def said(run: LaunchRun, text: str, timeout: float) -> bool:
    """Whether the launcher printed a line holding ``text`` within ``timeout`` s."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and run.proc.poll() is None:
        if text in run.stderr_text():
            return True
        time.sleep(0.2)
    return text in run.stderr_text()


def starts(run: LaunchRun, task: str, count: int, timeout: float) -> bool:
    """Whether ``task`` said "ready" (a start of the stand-in) ``count`` times in time."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and run.proc.poll() is None:
        if sum(1 for line in list(run.lines)
               if line.task == task and line.text.startswith("ready")) >= count:
            return True
        time.sleep(0.2)
    return False


def test_a_worker_whose_host_returns_is_started_again(hosts, tmp_path):
    h1 = hosts.hosts[0]
    done = tmp_path / "done"
    spec = write_spec(tmp_path, hosts, {"chief": ["h2"], "worker": ["h3", "h1"], "ps": ["h3"]},
                      command=[PY_TF215, SLEEPER, "--serve", "worker:1", "--until", str(done)],
                      strategy="parameter_server", roles={"worker": {"minimum": 1}},
                      restart={"worker": {"policy": "on-failure", "max_restarts": 0}},
                      ssh=hosts.ssh_section(connect_timeout=2),
                      timeouts={"kill": 2, "finish": 5, "start": 60, "poll": 0.5,
                                "unresponsive": 0})
    run = LaunchRun(spec)
    try:
        assert starts(run, "worker:1", 1, timeout=60), run.stderr_text()[-3000:]
        time.sleep(1)
        link(h1, "down")
        # ssh's keepalive: 3 unanswered questions 10 s apart
        assert said(run, f"worker:1 lost the ssh connection to {h1.address} (", timeout=90), \
            run.stderr_text()[-3000:]
        assert said(run, "restart budget spent (0 of 0 restarts of worker:1 used); going on "
                         "with 1 of 2 workers", timeout=10), run.stderr_text()[-3000:]
        assert said(run, f"worker:1's host {h1.address} does not answer: worker:1 is started "
                         f"again once it does", timeout=60), run.stderr_text()[-3000:]
    finally:
        link(h1, "up")
    assert said(run, f"worker:1's host {h1.address} answers again: starting worker:1 again",
                timeout=90), run.stderr_text()[-3000:]
    assert starts(run, "worker:1", 2, timeout=60), run.stderr_text()[-3000:]
    done.touch()
    status = run.wait(timeout=120)
    stderr = run.stderr_text()
    assert status == 0, stderr[-3000:]
    assert "training finished and every task ended" in stderr, stderr[-3000:]
    (run_dir,) = (tmp_path / "runs").iterdir()
    summary = json.loads((run_dir / "summary.json").read_text())
    (lost,) = summary["lost"]
    assert lost["task"] == "worker:1" and lost["host"] == h1.address
    assert lost["returned_at"] is not None and lost["returned_at"] > lost["at"]
    assert hosts.leftovers(timeout=30) == {}
