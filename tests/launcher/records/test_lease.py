"""The rules of model_dir's lease (launcher/records/lease.py), on a local model_dir: who may take
it, when a holder is gone, --force, a corrupt lease file, release and heartbeat."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time

import pytest

from launcher.model_dir import ModelDir
from launcher.records import lease as leases
from launcher.records.lease import LEASE_FILE, STALE_AFTER, Holder, LeaseError, acquire


@pytest.fixture
def model_dir(tmp_path) -> ModelDir:
    return ModelDir(str(tmp_path / "model"))


def lease_doc(model_dir: ModelDir) -> dict:
    with open(os.path.join(model_dir.url, LEASE_FILE)) as f:
        return json.load(f)


def write_lease(model_dir: ModelDir, **fields) -> None:
    now = time.time()
    doc = {"run_id": "other-run", "host": socket.gethostname(), "pid": os.getpid(),
           "started": now - 60, "heartbeat": now, "pid_started": None, "run_dir": ""}
    doc.update(fields)
    os.makedirs(model_dir.url, exist_ok=True)
    with open(os.path.join(model_dir.url, LEASE_FILE), "w") as f:
        f.write(json.dumps(doc))


def dead_pid() -> int:
    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    proc.wait()
    return proc.pid


def test_a_free_model_dir_is_taken_and_released(model_dir):
    lease = acquire(model_dir, "run-a", "/runs/run-a")
    doc = lease_doc(model_dir)
    assert (doc["run_id"], doc["host"], doc["pid"]) == ("run-a", socket.gethostname(),
                                                        os.getpid())
    assert doc["run_dir"] == "/runs/run-a" and doc["heartbeat"] >= doc["started"]
    lease.release()
    assert not os.path.exists(os.path.join(model_dir.url, LEASE_FILE))
    assert os.listdir(model_dir.url) == []          # no temporary file left either


def test_a_live_holder_refuses_a_second_run_in_one_line(model_dir):
    first = acquire(model_dir, "run-a")
    with pytest.raises(LeaseError) as refused:
        acquire(model_dir, "run-b")
    message = str(refused.value)
    assert "\n" not in message and refused.value.exit_status == 2
    assert message.startswith(f"model_dir {model_dir.url} is in use by run run-a (host "
                              f"{socket.gethostname()}, launcher pid {os.getpid()}, ")
    assert "follow it with `launch status run-a`" in message
    assert lease_doc(model_dir)["run_id"] == "run-a"        # the holder's lease untouched
    with pytest.raises(LeaseError):
        leases.check(model_dir, "run-b")
    first.release()
    acquire(model_dir, "run-c").release()                   # free again once released


def test_the_same_run_id_renews_its_own_lease(model_dir):
    write_lease(model_dir, run_id="run-a", pid=os.getpid(), started=123.0)
    warnings: list[str] = []
    lease = acquire(model_dir, "run-a", warn=warnings.append)   # a requeued run comes back
    doc = lease_doc(model_dir)
    assert doc["pid"] == os.getpid() and doc["started"] == 123.0 and warnings == []
    leases.check(model_dir, "run-a")
    lease.release()


def test_a_dead_launcher_on_this_host_is_taken_over_with_a_line(model_dir):
    pid = dead_pid()
    write_lease(model_dir, pid=pid)
    warnings: list[str] = []
    lease = acquire(model_dir, "run-b", warn=warnings.append)
    assert lease_doc(model_dir)["run_id"] == "run-b"
    assert warnings == [f"model_dir lease taken over from run other-run (host "
                        f"{socket.gethostname()}, launcher pid {pid}, heartbeat 0s ago): its "
                        f"launcher (pid {pid} on {socket.gethostname()}) is gone"]
    lease.release()


def test_a_reused_pid_is_not_the_holder(model_dir):
    """The pid lives, but it is another process than the launcher that wrote the lease."""
    write_lease(model_dir, pid=os.getpid(), pid_started=1000.0)
    assert leases.gone(Holder.parse(json.dumps(lease_doc(model_dir)).encode()), time.time())


def test_a_foreign_host_is_judged_by_its_heartbeat(model_dir):
    write_lease(model_dir, host="node-7.invalid", pid=1)
    with pytest.raises(LeaseError, match=r"in use by run other-run \(host node-7.invalid"):
        acquire(model_dir, "run-b")
    write_lease(model_dir, host="node-7.invalid", pid=1, heartbeat=time.time() - STALE_AFTER - 5)
    warnings: list[str] = []
    acquire(model_dir, "run-b", warn=warnings.append).release()
    assert len(warnings) == 1 and "its last heartbeat is 95s old (a live launcher beats every " \
                                  "30s; the bound is 90s)" in warnings[0]


def test_force_takes_a_live_lease_with_a_warning(model_dir):
    write_lease(model_dir, host="node-7.invalid", pid=1)
    warnings: list[str] = []
    leases.check(model_dir, "run-b", force=True)
    lease = acquire(model_dir, "run-b", force=True, warn=warnings.append)
    assert lease_doc(model_dir)["run_id"] == "run-b"
    assert len(warnings) == 1 and warnings[0].startswith(
        "--force: model_dir lease taken from run other-run (host node-7.invalid")
    assert "two runs writing one model_dir lose or mix checkpoints" in warnings[0]
    lease.release()


@pytest.mark.parametrize("content, why", [
    (b'{"run_id": "x", "ho', "not JSON: Unterminated string"),
    (b"[1, 2]", "not a JSON object but list"),
    (b'{"run_id": "x"}', "no host, pid, started, heartbeat"),
    (b'{"run_id": "x", "host": "h", "pid": "p", "started": 1, "heartbeat": 2}',
     "a field of the wrong type"),
    (b"\xff\xfe", "not JSON: 'utf-8' codec can't decode"),
])
def test_a_corrupt_lease_is_one_clear_line(model_dir, content, why):
    os.makedirs(model_dir.url)
    path = os.path.join(model_dir.url, LEASE_FILE)
    with open(path, "wb") as f:
        f.write(content)
    for call in (lambda: acquire(model_dir, "run-b"), lambda: leases.check(model_dir, "run-b")):
        with pytest.raises(LeaseError) as refused:
            call()
        message = str(refused.value)
        assert "\n" not in message and message.startswith(f"model_dir lease {path} cannot be "
                                                           f"read ({why}")
        assert message.endswith("make sure no run uses this model_dir, then remove the file or "
                                "launch again with --force")
    warnings: list[str] = []
    acquire(model_dir, "run-b", force=True, warn=warnings.append).release()
    assert len(warnings) == 1 and warnings[0].startswith("--force: the model_dir lease")


def test_release_leaves_another_runs_lease_and_a_requeue_keeps_its_own(model_dir):
    lease = acquire(model_dir, "run-a")
    lease.release(keep=True)                       # requeued: it comes back as run-a
    assert lease_doc(model_dir)["run_id"] == "run-a"
    lease = acquire(model_dir, "run-a")
    write_lease(model_dir, run_id="run-b")         # taken with --force meanwhile
    assert lease.beat() is False and lease.lost_to.run_id == "run-b"
    lease.release()
    assert lease_doc(model_dir)["run_id"] == "run-b"


def test_the_heartbeat_moves(model_dir):
    lease = acquire(model_dir, "run-a")
    first = lease_doc(model_dir)["heartbeat"]
    time.sleep(0.05)
    lease.start_heartbeat(every=0.01)
    deadline = time.monotonic() + 5
    while lease_doc(model_dir)["heartbeat"] == first and time.monotonic() < deadline:
        time.sleep(0.01)
    lease.release()
    assert lease.holder.heartbeat > first


def test_dry_run_says_what_launch_would_do(model_dir):
    assert leases.dry_run_line(model_dir, "run-b") == \
        f"lease: free ({model_dir.url}/{LEASE_FILE})"
    write_lease(model_dir)
    assert leases.dry_run_line(model_dir, "run-b").endswith(
        "launch would refuse to start (follow it with `launch status other-run`)")
    write_lease(model_dir, pid=dead_pid())
    assert leases.dry_run_line(model_dir, "run-b").endswith("is gone: it would be taken over")
    write_lease(model_dir, run_id="run-b")
    assert "it is renewed" in leases.dry_run_line(model_dir, "run-b")


def test_a_run_slurm_still_holds_keeps_its_lease(model_dir, monkeypatch):
    """A requeued Slurm job waits in the queue: its launcher is gone and its heartbeat old,
    but Slurm still has the job, so the lease is not taken; once Slurm lets go, it is."""
    write_lease(model_dir, pid=dead_pid(), heartbeat=time.time() - STALE_AFTER - 60,
                backend="slurm", handle={"slurm_job": "42"})

    def holds(holder):
        return holder.backend == "slurm" and holder.handle == {"slurm_job": "42"}

    with pytest.raises(LeaseError, match="in use by run other-run"):
        acquire(model_dir, "run-b", holds=holds)
    acquire(model_dir, "run-b", holds=lambda holder: False).release()
