"""Detached Slurm runs on the real test cluster: `launch --detach` submits a batch script and
exits; the launcher runs inside the allocation; `launch status/logs/cancel` follow the run;
a requeued job resumes from the newest checkpoint under the same run id. And the other
side: SIGKILL of an attached `launch` releases its allocation at once."""

from __future__ import annotations

import json
import os
import re
import signal
import sys
import time
from pathlib import Path

import pytest
from infra.mlflow_server import read_run
from support import PY_TF215, REPO, launched, run_launch, state_of, tfcluster_tasks, wait_gone
from test_slurm_backend import node_steps, released, squeue, write_spec

from launcher.backends.slurm_follow import LIVE_STATES, job_state
from launcher.records.lease import LEASE_FILE
from orchestrator.checkpoints import newest_complete
from orchestrator.preemption import SAVING

FAULT_JOB = str(REPO / "tests" / "faults" / "jobs" / "estimator_job.py")
STOCK_ESTIMATOR = REPO / "tests" / "preemption" / "jobs" / "stock_estimator.py"
FAKE_TASK = str(REPO / "tests" / "local" / "fake_task.py")
# each task says which attempt of the run it is, then becomes the job
SHOW_ATTEMPT = 'echo "$TFCLUSTER_TASK restart count $TFCLUSTER_RESTART_COUNT"; exec "$0" "$@"'


@pytest.fixture
def runs(tmp_path, slurm_env, monkeypatch) -> dict[str, str]:
    monkeypatch.setenv("TFCLUSTER_RUNS", str(tmp_path / "runs"))
    return dict(slurm_env, TFCLUSTER_RUNS=str(tmp_path / "runs"))


def fake_spec(tmp_path: Path, plan: dict) -> Path:
    return write_spec(tmp_path, command=[sys.executable, FAKE_TASK], evaluator=None,
                      check_storage=False, env={"FAKE_PLAN": json.dumps(plan)})


def submit(spec: Path, env: dict) -> tuple[str, str]:
    """`launch --detach`: it exits at once; (run id, Slurm job id)."""
    done = run_launch(str(spec), "--detach", env=env, timeout=60)
    assert done.returncode == 0, done.stderr
    m = re.match(r"run (\S+) submitted as Slurm job (\d+);", done.stdout)
    assert m, done.stdout
    assert f"launch status {m.group(1)}" in done.stdout
    return m.group(1), m.group(2)


def wait_for(predicate, timeout: float, what: str):
    deadline = time.monotonic() + timeout
    while not (found := predicate()):
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.3)
    return found


def start_now(cluster, job: str) -> None:
    """Slurm holds a requeued job back for two minutes (BeginTime): let it start now, but
    only once its nodes are idle again. Started while they still complete the first run
    (or in the second they finished it), the job is killed ("Job credential revoked").
    The update is repeated until the job runs: one made while Slurm still finishes the
    requeue can be overwritten by the requeue's own BeginTime."""
    def state() -> str:
        return cluster.run("squeue", "-h", "-j", job, "-o", "%T", check=False).strip()

    def nodes_idle() -> bool:
        return set(cluster.run("sinfo", "-h", "-N", "-o", "%T", check=False).split()) == \
            {"idle"}

    def running() -> bool:
        now = state()
        assert now in ("PENDING", "CONFIGURING", "RUNNING"), \
            cluster.run("scontrol", "show", "job", job, check=False)
        if now == "PENDING":
            cluster.run("scontrol", "update", f"jobid={job}", "starttime=now", check=False)
            time.sleep(1)
        return now == "RUNNING"

    wait_for(lambda: state() == "PENDING" and nodes_idle(), 120,
             "the job pending again on idle nodes")
    time.sleep(2)    # slurmd compares a credential's time with the revocation's, by the second
    try:
        wait_for(running, 240, "the requeued job running again")
    except AssertionError as e:      # say why Slurm holds it back
        why = "\n".join(cluster.run(*argv, check=False) for argv in (
            ("squeue", "-h", "-j", job, "-o", "%T %r %S"), ("sinfo", "-h", "-N", "-o", "%N %T %E"),
            ("scontrol", "show", "job", job)))
        log = (cluster.root / "log" / "slurmctld.log").read_text()[-3000:]
        raise AssertionError(f"{e}\n{why}\n{log}") from None


def test_detach_dry_run_prints_the_batch_script(tmp_path, slurm_cluster):
    done = run_launch(str(write_spec(tmp_path)), "--detach", "--dry-run",
                      env=slurm_cluster.env)
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    sbatch = [line for line in lines if line.startswith("#SBATCH ")]
    for option in ("--nodes=2", "--cpus-per-task=2", "--mem=500M", "--partition=debug",
                   "--time=10", "--requeue", "--signal=B:TERM@120", "--open-mode=append"):
        assert f"#SBATCH {option}" in sbatch, sbatch
    exec_line = next(line for line in lines if line.startswith("exec "))
    assert "-m launcher.cli" in exec_line and "--in-allocation" in exec_line
    node_b = next(line for line in lines if "--nodelist=NODE_2" in line)
    assert node_b.endswith("the node step of 2 task(s), ps:0, worker:0")
    assert not squeue(slurm_cluster), "a dry run submits nothing"


@pytest.mark.tf
def test_detached_job_runs_to_the_end_and_a_requeue_resumes_it(tmp_path, runs,
                                                              slurm_cluster, mlflow_server):
    """A chief (node n1) and its ps (n2): the requeue and the resume are the batch job's and
    the chief's; a worker would add two TensorFlow starts and nothing to check. The run is
    tracked in MLflow by the launcher inside the batch job: the requeue continues its run."""
    spec = write_spec(tmp_path, name="slurm-requeue", evaluator=None, max_steps=500,
                      cluster={"chief": ["a"], "ps": ["b"]},
                      command=["bash", "-c", SHOW_ATTEMPT, PY_TF215, FAULT_JOB],
                      env={"FAULT_SAVE_STEPS": "100", "FAULT_STEP_SLEEP": "0.03",
                           "FAULT_PRINT_EVERY": "10"},
                      timeouts={"finish": 30, "kill": 5},
                      tracking={"mlflow": {"tracking_uri": mlflow_server.url,
                                           "experiment": "slurm-requeue"}})
    run_id, job = submit(spec, runs)
    assert job_state(job) in ("PENDING", "RUNNING")      # the submitting launch is gone
    run_dir = tmp_path / "runs" / run_id
    wait_for(lambda: state_of(tmp_path, run_id)["state"] == "running", 60, "the run to start")
    status = run_launch("status", run_id, env=runs)
    assert status.returncode == 0 and "state running" in status.stdout, status.stdout
    assert f"Slurm job {job}" in status.stdout
    lease = tmp_path / "model" / LEASE_FILE             # the run holds model_dir's lease
    assert json.loads(lease.read_text())["run_id"] == run_id
    # training under way, a checkpoint saved: requeue the running job (and let it start
    # again now: Slurm otherwise holds a requeued job back for two minutes)
    step = wait_for(lambda: (state_of(tmp_path, run_id)["step"] or 0) >= 100 and
                    state_of(tmp_path, run_id)["step"], 180, "a checkpoint")
    logs = run_launch("logs", run_id, "chief:0", env=runs)
    assert "chief:0 restart count 0" in logs.stdout and "tfjob-progress" in logs.stdout
    slurm_cluster.run("scontrol", "requeue", job)
    start_now(slurm_cluster, job)
    final = wait_for(lambda: (s := state_of(tmp_path, run_id))["state"] in
                     ("succeeded", "failed", "cancelled") and s, 240, "the end of the run")
    assert final["state"] == "succeeded", final
    assert final["run_id"] == run_id and final["attempt"] == 1
    wait_for(lambda: job_state(job) not in LIVE_STATES, 30, "the job's end")
    assert job_state(job) == "COMPLETED"            # the batch script exited 0
    # the second attempt knew it was resuming, and trained on from the checkpoint
    chief = (run_dir / "logs" / "chief-0.log").read_text()
    assert "chief:0 restart count 1" in chief
    first = int(re.search(r"tfjob-progress step=(\d+)", chief).group(1))
    assert step <= first < step + 150, (step, first)
    first_attempt = (run_dir / "logs" / "attempt-0" / "chief-0.log").read_text()
    assert "chief:0 restart count 0" in first_attempt
    status = run_launch("status", run_id, env=runs)
    assert status.returncode == 0 and "state succeeded" in status.stdout
    assert "attempt 2" in status.stdout
    assert released(slurm_cluster)
    assert not lease.exists()           # the second attempt renewed it, then let it go
    # one MLflow run for both attempts, logged from inside the batch job
    mlflow = json.loads(run_launch("status", run_id, "--json", env=runs).stdout)["mlflow"]
    tracked = read_run(mlflow_server.url, mlflow["run_id"])
    assert tracked["experiment_runs"] == 1 and tracked["status"] == "FINISHED"
    assert (tracked["tags"]["tfcluster.attempt"], tracked["tags"]["tfcluster.verdict"]) == \
        ("2", "succeeded")


@pytest.mark.tf
def test_the_warning_signal_saves_requeues_and_the_next_attempt_resumes(tmp_path, runs,
                                                                      slurm_cluster):
    """A stock Estimator job (a checkpoint every 600 s) gets the warning signal before its
    time limit (what --signal=B:TERM delivers: SIGTERM to the batch step). The chief saves
    where it is, the launcher requeues the job, the next attempt resumes from that
    checkpoint and ends 0 at max_steps, no restart charged. A chief (n1) and its ps (n2)."""
    spec = write_spec(tmp_path, name="slurm-preempt", evaluator=None, max_steps=700,
                      cluster={"chief": ["a"], "ps": ["b"]},
                      command=[PY_TF215, str(STOCK_ESTIMATOR)], env={"PACE_SECS": "0.02"},
                      timeouts={"finish": 30, "kill": 5})
    run_id, job = submit(spec, runs)
    run_dir = tmp_path / "runs" / run_id
    chief_log = run_dir / "logs" / "chief-0.log"
    logged = wait_for(lambda: (s := logged_steps(chief_log)) and s[-1] >= 200 and s[-1], 240,
                      "the chief's step 200")
    slurm_cluster.run("scancel", "--batch", "--signal=TERM", job)     # the warning signal
    start_now(slurm_cluster, job)
    final = wait_for(lambda: (s := state_of(tmp_path, run_id))["state"] in
                     ("succeeded", "failed", "cancelled", "preempted") and s, 300,
                     "the end of the run")
    assert final["state"] == "succeeded" and final["attempt"] == 1, final
    assert all(t["restarts"] == 0 for t in final["tasks"]), final["tasks"]
    first = (run_dir / "logs" / "attempt-0" / "chief-0.log").read_text(errors="replace")
    assert SAVING in first
    saved = [int(m.group(1)) for m in re.finditer(r"Saving checkpoints for (\d+)", first)]
    assert saved and saved[-1] >= logged, (saved, logged)
    resumed = logged_steps(chief_log)
    assert saved[-1] <= min(resumed) < saved[-1] + 100, (saved, resumed)
    assert newest_complete(str(tmp_path / "model")).step == 700
    wait_for(lambda: job_state(job) not in LIVE_STATES, 30, "the job's end")
    assert released(slurm_cluster)


def logged_steps(log: Path) -> list[int]:
    try:
        return [int(m.group(1)) for m in re.finditer(r"\bstep = (\d+)",
                                                    log.read_text(errors="replace"))]
    except OSError:
        return []


def test_cancel_of_a_detached_run_leaves_no_job_no_step_no_task(tmp_path, runs,
                                                               slurm_cluster):
    spec = fake_spec(tmp_path, {"chief": "forever", "worker": "forever", "ps": "forever"})
    run_id, job = submit(spec, runs)
    wait_for(lambda: state_of(tmp_path, run_id)["state"] == "running", 60, "the run to start")
    assert len(node_steps(slurm_cluster)) == 2            # three tasks on two nodes
    done = run_launch("cancel", run_id, env=runs, timeout=180)
    assert done.returncode == 0, done.stderr
    assert released(slurm_cluster, timeout=5)
    assert "2 idle" in slurm_cluster.run("sinfo", "-h", "-o", "%D %T")
    assert not wait_gone(tfcluster_tasks, timeout=5)
    status = run_launch("status", run_id, env=runs)
    assert status.returncode == 1 and "state cancelled" in status.stdout, status.stdout
    tasks = state_of(tmp_path, run_id)["tasks"]
    assert all(t["state"] == "stopped (SIGTERM)" for t in tasks), tasks
    # the SIGTERM reached the launcher in the batch step (as the warning signal does,
    # --signal=B:TERM): trainers first, the ps once they were gone
    events = [json.loads(line) for line in
              (tmp_path / "runs" / run_id / "events.jsonl").read_text().splitlines()]
    assert [e["tasks"] for e in events if e["event"] == "stopping"] == [
        ["chief:0", "worker:0"], ["ps:0"]]


def test_cancel_of_a_queued_run(tmp_path, runs, slurm_cluster):
    slurm_cluster.run("salloc", "--no-shell", "--nodes=2", "--exclusive", "--job-name=blocker")
    (held,) = slurm_cluster.jobs()
    try:
        run_id, job = submit(fake_spec(tmp_path, {"chief": "exit 0 after 0"}), runs)
        status = run_launch("status", run_id, env=runs)
        assert status.returncode == 0 and "state queued" in status.stdout, status.stdout
        assert f"Slurm job {job} is PENDING" in status.stdout
        assert run_launch("cancel", run_id, env=runs).returncode == 0
        assert slurm_cluster.jobs() == [held]
        status = run_launch("status", run_id, env=runs)
        assert status.returncode == 1 and "state cancelled" in status.stdout
    finally:
        slurm_cluster.run("scancel", held, check=False)
    assert released(slurm_cluster)


def test_sigkill_of_attached_launch_releases_the_allocation(tmp_path, slurm_env,
                                                            slurm_cluster):
    spec = fake_spec(tmp_path, {"chief": "forever", "worker": "forever", "ps": "forever"})
    with launched(str(spec), "--run-dir", str(tmp_path / "run"), "-q",
                  env=dict(os.environ, **slurm_env)) as proc:
        wait_for(lambda: len(node_steps(slurm_cluster)) == 2 or proc.poll() is not None,
                 60, "a step on each node")
        assert proc.poll() is None, proc.communicate()[1]
        proc.send_signal(signal.SIGKILL)
        proc.wait()
    assert released(slurm_cluster, timeout=15), "the allocation outlived its launcher"
    assert not wait_gone(tfcluster_tasks, timeout=10)


def test_cancel_of_an_attached_run_stops_its_launcher_and_the_allocation(tmp_path, runs,
                                                                        slurm_cluster):
    spec = fake_spec(tmp_path, {"chief": "forever", "worker": "forever", "ps": "forever"})
    with launched(str(spec), "-q", env=dict(os.environ, **runs)) as proc:
        wait_for(lambda: len(node_steps(slurm_cluster)) == 2 or proc.poll() is not None,
                 60, "a step on each node")
        (run_dir,) = (tmp_path / "runs").iterdir()
        # squeue lists a step as soon as srun asked for it; the run is "running" once the
        # launcher saw every task start (state.json's rows follow within ROWS_EVERY)
        wait_for(lambda: "state running" in run_launch("status", run_dir.name, env=runs).stdout,
                 30, "state running")
        status = run_launch("status", run_dir.name, env=runs)
        assert "state running" in status.stdout and "Slurm job" in status.stdout
        done = run_launch("cancel", run_dir.name, env=runs, timeout=180)
        assert done.returncode == 0, done.stderr
        assert proc.wait(timeout=30) == 128 + signal.SIGTERM   # its own ordered teardown
    assert released(slurm_cluster, timeout=5)
    assert not wait_gone(tfcluster_tasks, timeout=5)
    assert "state cancelled" in run_launch("status", run_dir.name, env=runs).stdout
