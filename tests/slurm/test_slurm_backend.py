"""The slurm backend against a real Slurm cluster (two slurmd nodes on this machine)."""

from __future__ import annotations

import json
import os
import signal
import time
from pathlib import Path

import pytest
from support import PY_TF215, ended_well, launched, run_launch, tfcluster_tasks, wait_gone

from launcher.backends.slurm_follow import job_state

REPO = Path(__file__).resolve().parents[2]
# each task first says where Slurm runs it, then becomes the Estimator example
SHOW_STEP = ('echo "$TFCLUSTER_TASK on node $SLURMD_NODENAME step $SLURM_JOB_ID.$SLURM_STEP_ID"; '
             'exec "$0" "$@"')
# ... and the worker's first start is killed (SIGKILL) at once
KILLED_ONCE = ('if [ "$TFCLUSTER_TASK/${TFCLUSTER_RESTART_COUNT:-0}" = worker:0/0 ]; then '
               'kill -KILL $BASHPID; fi; ' + SHOW_STEP)


def write_spec(tmp_path: Path, **overrides) -> Path:
    spec = {
        "name": "slurm-est",
        "cluster": {"chief": ["a"], "worker": ["b"], "ps": ["b"]},
        "evaluator": "a",
        "command": ["bash", "-c", SHOW_STEP, PY_TF215, "examples/estimator/train.py",
                    "--data-dir", str(tmp_path / "data"), "--save-steps", "100"],
        "workdir": str(REPO),
        "model_dir": str(tmp_path / "model"),
        "max_steps": 300,
        "backend": "slurm",
        "resources": {"default": {"cpus": 1}, "ps": {"memory": "500M"}},
        "slurm": {"partition": "debug", "time": "10"},
        "timeouts": {"finish": 90},
    }
    spec.update(overrides)
    path = tmp_path / "spec.json"
    path.write_text(json.dumps(spec))
    return path


def squeue(cluster, *args: str) -> list[str]:
    return cluster.run("squeue", "-h", *args).splitlines()


def node_steps(cluster) -> list[str]:
    """The live steps that run the job's tasks (one per node), by their ids."""
    return [line.split()[0] for line in squeue(cluster, "-s", "-o", "%i %j")
            if line.split()[1:] == ["tfc-node"]]


def released(cluster, timeout: float = 30) -> bool:
    """True once squeue shows neither a job nor a step."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if not squeue(cluster) and not squeue(cluster, "-s"):
            return True
        time.sleep(0.2)
    return False


def granted_job(stderr: str) -> str:
    line = next(x for x in stderr.splitlines() if "Slurm job" in x and "granted" in x)
    return line.split("Slurm job ")[1].split()[0]


def test_dry_run_prints_the_allocation_and_one_step_per_node(tmp_path, slurm_cluster):
    spec = write_spec(tmp_path)
    done = run_launch(str(spec), "--dry-run", env=slurm_cluster.env)
    assert done.returncode == 0, done.stderr
    out = done.stdout
    salloc = next(line for line in out.splitlines() if line.startswith("salloc "))
    assert "--nodes=2" in salloc and "--partition=debug" in salloc and "--time=10" in salloc
    # a and b each hold two 1-CPU tasks
    assert "--cpus-per-task=2" in salloc and "--mem=500M" in salloc
    steps = [line for line in out.splitlines() if line.startswith("srun ")]
    assert len(steps) == 2, "one step per node"
    assert all("--overlap" in s and "--jobid=$J" in s for s in steps)
    node_b = next(s for s in steps if "--nodelist=NODE_2" in s)
    # worker and ps: 1 CPU each; memory only where every task of the node gives it
    assert "--cpus-per-task=2" in node_b and "--mem=" not in node_b
    assert node_b.endswith("the node step of 2 task(s), ps:0, worker:0")
    assert any(line.startswith("#   ps:0: bash -c ") for line in out.splitlines())
    assert "scancel $J" in out
    one_each = run_launch(str(write_spec(tmp_path, slurm={"steps": "task"})), "--dry-run",
                          env=slurm_cluster.env)
    steps = [line for line in one_each.stdout.splitlines() if " srun " in line]
    ps = next(s for s in steps if s.endswith("# ps:0"))
    assert len(steps) == 4 and "--mem=500M" in ps and "--nodelist=NODE_2" in ps
    assert not squeue(slurm_cluster), "dry run must submit nothing"


def test_dry_run_json_carries_the_script(tmp_path, slurm_cluster):
    done = run_launch(str(write_spec(tmp_path)), "--dry-run", "--json", env=slurm_cluster.env)
    doc = json.loads(done.stdout)
    assert doc["backend"] == "slurm" and "salloc --no-shell" in doc["rendered"]
    assert {t["type"] for t in doc["tasks"]} == {"chief", "worker", "ps", "evaluator"}


@pytest.mark.parametrize("field, value, message", [
    ("slurm", {"partiton": "debug"}, "slurm.partiton: unknown key"),
    ("slurm", {"account": "a b"}, "slurm.account"),
    ("slurm", {"salloc_args": ["rm"]}, "slurm.salloc_args[0]"),
    ("resources", {"ps": {"partition": "other"}}, "resources.ps.partition"),
])
def test_bad_slurm_options_exit_2_naming_the_field(tmp_path, slurm_cluster, field, value,
                                                     message):
    done = run_launch(str(write_spec(tmp_path, **{field: value})), env=slurm_cluster.env)
    assert done.returncode == 2
    assert message in done.stderr
    assert not squeue(slurm_cluster)


def test_more_nodes_than_the_cluster_has_fail_cleanly(tmp_path, slurm_cluster):
    spec = write_spec(tmp_path, cluster={"chief": ["a"], "worker": ["b", "c"]},
                      evaluator=None, command=["true"],
                      slurm={"allocation_timeout": 5})
    done = run_launch(str(spec), env=slurm_cluster.env, timeout=60)
    assert done.returncode == 2
    assert "salloc failed" in done.stderr
    assert released(slurm_cluster)


def test_a_node_whose_interpreter_lacks_tensorflow_is_named(tmp_path, slurm_cluster):
    """The environment check runs on each node (the node step's probe) before any task."""
    (tmp_path / "train.py").write_text("import tensorflow as tf\n")
    spec = write_spec(tmp_path, command=["/usr/bin/python3", "train.py"],
                      workdir=str(tmp_path), evaluator=None,
                      cluster={"chief": ["a"], "ps": ["b"]})
    done = run_launch(str(spec), "--run-dir", str(tmp_path / "run"), env=slurm_cluster.env,
                      timeout=120)
    assert done.returncode == 2, done.stderr
    assert done.stderr.splitlines()[-3:] == [
        "launch: error: 2 tasks cannot start; nothing was started:",
        "  ps:0 on node n2: /usr/bin/python3 cannot import tensorflow (the entry script "
        "train.py imports it): install TensorFlow for that interpreter, or give the task "
        "one that has it",
        "  chief:0 on node n1: /usr/bin/python3 cannot import tensorflow (the entry script "
        "train.py imports it): install TensorFlow for that interpreter, or give the task "
        "one that has it"], done.stderr
    assert not (tmp_path / "model").exists()
    assert released(slurm_cluster)


def test_failing_step_fails_the_job_and_releases_the_allocation(tmp_path, slurm_cluster):
    script = 'if [ "$TFCLUSTER_TASK" = worker:0 ]; then sleep 1; exit 3; fi; exec sleep 120'
    spec = write_spec(tmp_path, command=["bash", "-c", script])
    done = run_launch(str(spec), "--run-dir", str(tmp_path / "run"), env=slurm_cluster.env,
                      timeout=120)
    assert done.returncode == 1, done.stderr
    assert "worker:0 failed with exit status 3" in done.stderr
    assert released(slurm_cluster)


@pytest.mark.tf
def test_estimator_job_succeeds_and_releases_the_allocation(tmp_path, slurm_env,
                                                            slurm_cluster):
    """One step per node runs that node's tasks; the worker, killed at its first start, is
    restarted alone, in the same step; each task's output is in its own log. The chief saves
    a checkpoint at max_steps only (and TensorFlow's first one): the evaluator evaluates
    once or twice, not at every save."""
    run_dir = tmp_path / "run"
    spec = write_spec(tmp_path, command=[
        "bash", "-c", KILLED_ONCE, PY_TF215, "examples/estimator/train.py",
        "--data-dir", str(tmp_path / "data"), "--save-steps", "300"])
    done = run_launch(str(spec), "--run-dir", str(run_dir), env=slurm_env, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    summary = json.loads((run_dir / "summary.json").read_text())
    exits = {t["task"]: (t["exit"], t["stopped"]) for t in summary["tasks"]}
    restarts = {t["task"]: t["restarts"] for t in summary["tasks"]}
    assert restarts == {"chief:0": 0, "worker:0": 1, "ps:0": 0, "evaluator:0": 0}, restarts
    assert "killed by SIGKILL" in done.stderr, done.stderr[-3000:]
    assert exits["chief:0"] == (0, False)
    assert ended_well(next(t for t in summary["tasks"] if t["task"] == "worker:0"))
    assert exits["evaluator:0"] == (0, False)
    assert exits["ps:0"][1] is True, "the ps is stopped by the launcher once training ended"
    # the tasks ran as steps of one job, on the nodes their host labels name
    job = granted_job(done.stderr)
    chief_log = (run_dir / "logs" / "chief-0.log").read_text()
    worker_log = (run_dir / "logs" / "worker-0.log").read_text()
    ps_log = (run_dir / "logs" / "ps-0.log").read_text()
    assert f"chief:0 on node n1 step {job}." in chief_log and "worker:0" not in chief_log
    steps = {line.rsplit(" ", 1)[1] for log in (chief_log, worker_log, ps_log)
             for line in log.splitlines() if " on node " in line}
    assert len(steps) == 2, f"one step per node: {steps}"
    assert f"worker:0 on node n2 step {job}." in worker_log and "ps:0" not in worker_log
    assert (tmp_path / "model" / "checkpoint").exists()
    # every step ended and the allocation is released
    assert released(slurm_cluster)
    assert job_state(job) in ("CANCELLED", "COMPLETED", "GONE")


@pytest.mark.tf
def test_interrupted_run_leaves_no_process_and_no_job(tmp_path, slurm_env, slurm_cluster):
    """Interrupted once the chief trained and saved: a chief (n1) and its ps (n2), one step
    on each node; no worker or evaluator (the rule does not look at them)."""
    spec = write_spec(tmp_path, max_steps=100000, evaluator=None,
                      cluster={"chief": ["a"], "ps": ["b"]})
    run_dir = tmp_path / "run"
    with launched(str(spec), "--run-dir", str(run_dir), "-q",
                  env=dict(os.environ, **slurm_env)) as proc:
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:   # wait until the chief trained and saved
            if (tmp_path / "model" / "checkpoint").exists() or proc.poll() is not None:
                break
            time.sleep(0.5)
        assert len(node_steps(slurm_cluster)) == 2
        proc.send_signal(signal.SIGINT)
        _, err = proc.communicate(timeout=120)
    assert proc.returncode == 130, err
    assert released(slurm_cluster, timeout=5)
    assert not wait_gone(tfcluster_tasks, timeout=10)


def test_ctrl_c_while_the_allocation_is_pending_cancels_it(tmp_path, slurm_env, slurm_cluster):
    slurm_cluster.run("salloc", "--no-shell", "--nodes=2", "--exclusive", "--job-name=blocker")
    (held,) = slurm_cluster.jobs()
    try:
        spec = write_spec(tmp_path, command=["sleep", "60"])
        with launched(str(spec), "--run-dir", str(tmp_path / "run"),
                      env=dict(os.environ, **slurm_env)) as proc:
            deadline = time.monotonic() + 60
            while len(squeue(slurm_cluster)) < 2 and time.monotonic() < deadline:
                time.sleep(0.2)
            assert "PENDING" in slurm_cluster.run("squeue", "-h", "-o", "%j %T")
            proc.send_signal(signal.SIGINT)
            _, err = proc.communicate(timeout=60)
        assert proc.returncode == 130, err
        assert slurm_cluster.jobs() == [held], "only the blocking job is left"
    finally:
        slurm_cluster.run("scancel", held, check=False)
    assert released(slurm_cluster)


def test_a_step_whose_exec_fails_is_one_line_from_slurmstepd(tmp_path, slurm_env,
                                                             slurm_cluster):
    """The program lost its #! line between the check and the start: slurmstepd's words
    (through srun) become one line naming the task, the command and the node."""
    from launcher import api

    program = tmp_path / "train"
    program.write_text("echo no shebang\n")
    program.chmod(0o755)
    doc = json.loads(write_spec(tmp_path, evaluator=None, command=[str(program), "-v"],
                                cluster={"chief": ["a"]},
                                resources={"default": {"cpus": 1}}).read_text())
    spec, backend = api.prepare(doc)
    try:
        backend.prepare()
        plan = api.make_plan(spec, backend, None)
        handle = backend.start(plan.task("chief"))
        output = b"".join(iter(handle.output.readline, b""))
        deadline = time.monotonic() + 60
        while handle.poll() is None and time.monotonic() < deadline:
            time.sleep(0.1)
        handle.output.close()
        assert handle.poll() not in (None, 0), output
        assert handle.start_failure == f"chief:0: cannot start {program} -v on " \
            f"{plan.task('chief').host}: no #! line and not a binary (exec format error)", \
            output
    finally:
        backend.close()
    assert released(slurm_cluster)
