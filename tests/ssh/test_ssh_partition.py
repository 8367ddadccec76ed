"""A real ssh host cut off mid-training (its network namespace's link brought down, then up
again): the launcher names the ps there after ``timeouts.unresponsive`` (its TF server no
longer answers gRPC, though its ssh session is still open), fails the job under policy
``never``. No task is left on any host, not even on the cut-off one while its link is still
down (its bootstrap ends the task when the launcher's heartbeat stops; only sshd's session
for the dead connection waits there), and nothing at all once the link is back.

The tasks are stand-ins (tests/ssh/jobs/sleeper.py: its ps answers TensorFlow's GetStatus
through tests/fake_tf_server.py, and holds a grandchild in a process group of its own): this
is the ssh backend's mechanics (a cut host, its bootstrap's heartbeat); a real TensorFlow ps
that stops answering is tests/faults/test_kills.py and tests/slurm/test_slurm_frozen.py;
real TensorFlow over ssh, test_ssh_jobs.py::test_estimator_job_across_three_hosts."""

from __future__ import annotations

import re
import subprocess
import time

import pytest
from faults.harness import Kill, LaunchRun, detected_in
from ssh_specs import write_spec
from support import PY_TF215, REPO

UNRESPONSIVE = 8
PROBE_PERIOD = 2     # launcher.monitors.liveness.PROBE_PERIOD

SLEEPER = str(REPO / "tests" / "ssh" / "jobs" / "sleeper.py")

pytestmark = pytest.mark.slow


def tasks_left(bed, timeout: float) -> dict[str, list[str]]:
    """What runs on the hosts besides sshd (while cut off, h1's sshd session for the dead
    connection waits for the link), once nothing else is left or after ``timeout`` s."""
    deadline = time.monotonic() + timeout
    while True:
        # a description without a command line is a process that ended while it was read
        left = {h: [p for p in procs if len(p.split()) > 1 and not p.split()[1].startswith("sshd")]
                for h, procs in bed.leftovers(timeout=0).items()}
        left = {h: procs for h, procs in left.items() if procs}
        if not left or time.monotonic() > deadline:
            return left
        time.sleep(0.2)


def answered(run: LaunchRun, task: str, timeout: float) -> bool:
    """Whether the launcher asked ``task`` (a sleeper) GetStatus within ``timeout`` s."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and run.proc.poll() is None:
        if any(line.task == task and line.text == "answered GetStatus"
               for line in list(run.lines)):
            return True
        time.sleep(0.1)
    return False


def link(host, state: str) -> None:
    subprocess.run(["ip", "link", "set", host.veth, state], check=True)


def test_partitioned_ps_host_is_named_and_nothing_is_left_on_any_host(hosts, tmp_path):
    h1 = hosts.hosts[0]
    spec = write_spec(tmp_path, hosts, {"chief": ["h2"], "worker": ["h3"], "ps": ["h1"]},
                      command=[PY_TF215, SLEEPER], max_steps=100000, restart={"ps": "never"},
                      timeouts={"kill": 2, "finish": 5, "start": 60,
                                "unresponsive": UNRESPONSIVE})
    run = LaunchRun(spec)
    try:
        # the ps answered the launcher once (from then on a silence of UNRESPONSIVE s loses
        # it); a moment for that answer to reach the launcher
        assert answered(run, "ps:0", timeout=60), run.stderr_text()[-3000:]
        time.sleep(1)
        link(h1, "down")
        cut = Kill("ps:0", time.monotonic(), run.top_step(), "partition")
        status = run.wait(timeout=120)
        left_while_cut = tasks_left(hosts, timeout=20)
    finally:
        link(h1, "up")
    stderr = run.stderr_text()
    assert status == 1, stderr[-3000:]
    assert re.search(rf"job FAILED \(exit status 1\) after [\d.]+s: ps:0 \({h1.address}:\d+\) "
                     rf"has not answered TensorFlow's gRPC for {UNRESPONSIVE} s; restart "
                     rf"policy of ps is never", stderr), stderr[-3000:]
    (run_dir,) = (tmp_path / "runs").iterdir()
    reacted = detected_in(run_dir, cut)
    assert reacted is not None and reacted <= UNRESPONSIVE + PROBE_PERIOD + 0.5, reacted
    assert left_while_cut == {}, left_while_cut
    assert hosts.leftovers(timeout=30) == {}
