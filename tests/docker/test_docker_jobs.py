"""The docker backend on a real engine: real TensorFlow tasks, each its own container."""

from __future__ import annotations

import json
import re
import signal
import time
from pathlib import Path

import pytest
from docker_support import IMAGE, docker_spec
from support import ended_well, launched, run_launch

pytestmark = [pytest.mark.tf, pytest.mark.slow]
TASKS = ("ps:0", "chief:0", "worker:0", "worker:1", "evaluator:0")
ROLES = ("ps:0", "chief:0", "worker:0", "evaluator:0")     # one task of each
MAX_STEPS = 300
RUN_LABEL = "tfcluster.run"


def write_spec(tmp_path: Path, spec: dict) -> str:
    path = tmp_path / "spec.json"
    path.write_text(json.dumps(spec))
    return str(path)


def shared_spec(tmp_path: Path, **overrides) -> tuple[str, Path]:
    """The Estimator example with model_dir in a folder bind-mounted into every container
    at the same path."""
    shared = tmp_path / "shared"
    shared.mkdir()
    model_dir = shared / "model"
    return write_spec(tmp_path, docker_spec(str(model_dir), [f"{shared}:{shared}"],
                                            **overrides)), model_dir


def task_containers(engine) -> set[str]:
    """Containers of any run that are tasks (not storage probes)."""
    return {n for n in engine.containers(label=RUN_LABEL) if "-probe-" not in n}


def wait_for(predicate, timeout: float, proc=None):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        if proc is not None and proc.poll() is not None:
            raise AssertionError(f"launch ended early ({proc.returncode}): "
                                 f"{proc.stderr.read()[-2000:]}")
        time.sleep(0.2)
    raise AssertionError(f"not reached within {timeout:.0f}s")


def events(run_dir: Path) -> list[dict]:
    return [json.loads(line) for line in (run_dir / "events.jsonl").read_text().splitlines()]


def test_estimator_job_runs_as_one_container_per_task_and_a_killed_one_is_restarted(
        engine, image, tmp_path):
    """The Estimator example with every role (chief, worker, ps, evaluator), a container
    each; model_dir in a named volume that every container mounts, the launcher follows it
    through the volume's mount point on this machine. Once the first checkpoint is there,
    the worker's container is killed: the restart policy starts it again and the job ends
    well (one Estimator run for both rules). One worker, 300 steps (each costs the chief,
    the worker and the ps CPU) and checkpoints at steps 0 and 300 only (two evaluations)
    keep it cheap."""
    volume = "tfc-test-model"
    spec = write_spec(tmp_path, docker_spec(
        "/shared/model", [f"{volume}:/shared"], max_steps=MAX_STEPS,
        cluster={"chief": ["localhost"], "worker": ["localhost"], "ps": ["localhost"]},
        command=["python", "examples/estimator/train.py", "--save-steps", str(MAX_STEPS)],
        restart={"worker": {"policy": "on-failure", "max_restarts": 2, "backoff": 0.5}}))
    run_dir = tmp_path / "run"
    seen: set[str] = set()
    killed = False
    try:
        with launched(spec, "--run-dir", str(run_dir), "--quiet") as proc:
            while proc.poll() is None:
                seen |= task_containers(engine)
                if not killed and (run_dir / "plan.json").exists():
                    plan = json.loads((run_dir / "plan.json").read_text())
                    if Path(plan["storage"]["url"], "checkpoint").exists():
                        engine.docker("kill", f"tfc-{plan['run_id']}-worker-0")
                        killed = True
                time.sleep(0.5)
            stderr = proc.stderr.read()
        assert proc.returncode == 0, stderr
        assert killed, "no checkpoint was seen while the job ran"
        plan = json.loads((run_dir / "plan.json").read_text())
        assert {f"tfc-{plan['run_id']}-{t.replace(':', '-')}" for t in ROLES} <= seen
        rows = {r["task"]: r for r in json.loads((run_dir / "summary.json").read_text())["tasks"]}
        assert rows["ps:0"]["stopped"] and rows["ps:0"]["exit"] == -signal.SIGTERM
        assert rows["chief:0"]["exit"] == 0 and rows["evaluator:0"]["exit"] == 0, rows
        assert ended_well(rows["worker:0"]), rows
        assert "metrics of each checkpoint, evaluated afresh" in stderr   # read in the volume
        assert plan["storage"]["url"].endswith(f"/volumes/{volume}/_data/model")
        saved = engine.docker("run", "--rm", "--mount", f"type=volume,src={volume},dst=/shared",
                              IMAGE, "sh", "-c", "cat /shared/model/checkpoint; ls /shared/model")
        state, listing = saved.stdout.decode().split("\n", 1)[0], saved.stdout.decode()
        step = int(state.split('"', 2)[1].rsplit("-", 1)[1])
        assert step >= MAX_STEPS and f"model.ckpt-{step}.index" in listing   # in the volume
        assert "loss" in (run_dir / "logs" / "chief-0.log").read_text()
        assert engine.containers(label=f"{RUN_LABEL}={plan['run_id']}") == []
        # the killed container, restarted by the policy
        assert "worker:0" in stderr and "restart" in stderr
        log = events(run_dir)
        exited = [e for e in log if e["event"] == "task_exited" and e["task"] == "worker:0"]
        assert exited[0]["status"] == -signal.SIGKILL and not exited[0]["stopped"]
        assert [e["task"] for e in log if e["event"] == "restart_scheduled"] == ["worker:0"]
        starts = [e for e in log if e["event"] == "task_started" and e["task"] == "worker:0"]
        assert [e["restarts"] for e in starts] == [0, 1]
        assert rows["worker:0"]["restarts"] == 1
    finally:
        engine.docker("volume", "rm", "-f", volume, check=False)


def test_model_dir_private_to_each_container_is_refused_before_training(engine, image,
                                                                         tmp_path):
    model_dir = tmp_path / "not-shared" / "model"        # no volume: each container's own
    spec = write_spec(tmp_path, docker_spec(str(model_dir)))
    run_dir = tmp_path / "run"
    done = run_launch(spec, "--run-dir", str(run_dir), timeout=180)
    assert done.returncode == 2, done.stderr
    assert "model_dir is not the same storage for every task" in done.stderr
    for task in TASKS:
        assert f"  {task} on host localhost" in done.stderr
    assert not [e for e in events(run_dir) if e["event"] == "task_started"]
    assert not (run_dir / "logs").exists()
    assert not model_dir.exists()               # nothing written, the empty dir removed
    assert engine.containers() == []


@pytest.mark.parametrize("sig", [signal.SIGKILL, signal.SIGINT])
def test_no_container_is_left_when_launch_is_killed_or_interrupted(engine, image, tmp_path,
                                                                   sig):
    """Every task a container that would run for an hour (a sleep: what the containers run
    does not matter to their removal, and TensorFlow would only cost CPU here)."""
    spec, _ = shared_spec(tmp_path, max_steps=10**6,
                          command=["python", "-c", "import time; time.sleep(3600)"])
    with launched(spec, "--run-dir", str(tmp_path / "run"), "--quiet") as proc:
        wait_for(lambda: len(task_containers(engine)) == len(TASKS), 120, proc)
        proc.send_signal(sig)
        ended = time.monotonic()
        proc.wait(timeout=60)
        wait_for(lambda: not engine.containers(label=RUN_LABEL), 10)
        gone_after = time.monotonic() - ended
    assert proc.returncode == (-signal.SIGKILL if sig == signal.SIGKILL else 130)
    assert gone_after < 10


def test_a_user_network_is_made_for_the_run_and_removed(engine, image, tmp_path):
    """Tasks reach each other by their host names in the spec; the network goes away."""
    shared = tmp_path / "shared"
    shared.mkdir()
    probe = ("import json, os, socket, sys, time\n"
             "cfg = json.loads(os.environ['TF_CONFIG'])\n"
             "if cfg['task']['type'] == 'ps':\n"
             "    time.sleep(3600)\n"
             "for addr in sum(cfg['cluster'].values(), []):\n"
             "    print(addr, socket.gethostbyname(addr.rsplit(':', 1)[0]))\n"
             "print('me', socket.gethostname())\n"
             "open(os.path.join(sys.argv[1], cfg['task']['type']), 'w').close()\n"
             # each stays until both resolved every name (a container gone takes its name)
             "while not all(os.path.exists(os.path.join(sys.argv[1], t))\n"
             "              for t in ('chief', 'worker')):\n"
             "    time.sleep(0.1)\n")
    spec = write_spec(tmp_path, {
        "name": "net", "cluster": {"chief": ["chief"], "worker": ["worker-0"], "ps": ["ps-0"]},
        "command": ["python", "-c", probe, str(shared)], "model_dir": str(shared / "model"),
        "max_steps": 10, "backend": "docker", "timeouts": {"kill": 5},
        "docker": {"image": IMAGE, "network": "tfc-test-net",
                   "volumes": [f"{shared}:{shared}"]}})
    run_dir = tmp_path / "run"
    done = run_launch(spec, "--run-dir", str(run_dir), timeout=180)
    assert done.returncode == 0, done.stderr
    for task, host in (("chief-0", "chief"), ("worker-0", "worker-0")):
        log = (run_dir / "logs" / f"{task}.log").read_text().split("\n")
        assert f"me {host}" in log
        addresses = {line.split()[0]: line.split()[1] for line in log if ":2222 " in line}
        assert sorted(addresses) == ["chief:2222", "ps-0:2222", "worker-0:2222"]
        assert len(set(addresses.values())) == 3      # a container, an address each
    assert engine.networks(label=RUN_LABEL) == []
    assert "tfc-test-net" not in engine.lines("network", "ls", "--format", "{{.Name}}")


def test_an_image_not_on_the_engine_is_refused_before_anything_starts(engine, tmp_path):
    spec = write_spec(tmp_path, docker_spec(str(tmp_path / "m"),
                                            docker={"image": "tfcluster:no-such-tag"}))
    done = run_launch(spec, "--run-dir", str(tmp_path / "run"), timeout=60)
    assert done.returncode == 2
    assert "docker.image: 'tfcluster:no-such-tag' is not on the engine" in done.stderr
    assert len(done.stderr.strip().splitlines()) == 1
    assert not (tmp_path / "m").exists()


def test_a_script_missing_in_the_image_is_one_line_and_nothing_starts(engine, image,
                                                                      tmp_path):
    """The environment check runs in the image (one probe container for every task): the
    script the interpreter is given is not there."""
    spec = write_spec(tmp_path, docker_spec("/nowhere/model", check_storage=False,
                                            command=["python", "no_such_train.py"]))
    done = run_launch(spec, "--run-dir", str(tmp_path / "run"), timeout=180)
    assert done.returncode == 2, done.stderr
    assert re.fullmatch(r"launch: error: ps:0, chief:0, worker:0, worker:1, evaluator:0 on "
                        rf"image {re.escape(IMAGE)}: script no_such_train.py not found in "
                        r"/\S* \(the task's workdir\)",
                        done.stderr.strip()), done.stderr
    assert engine.containers(label=RUN_LABEL) == []


def test_a_command_missing_in_the_image_is_one_line_and_exit_status_2(engine, image,
                                                                       tmp_path):
    """The container's init cannot exec the command: one line naming the task, the command
    and the image, exit status 2, no container left."""
    spec = write_spec(tmp_path, docker_spec("/nowhere/model", command=["no-such-trainer"],
                                            check_storage=False))
    done = run_launch(spec, "--run-dir", str(tmp_path / "run"), timeout=180)
    assert done.returncode == 2, done.stderr
    assert "Traceback" not in done.stderr
    assert re.fullmatch(r"launch: error: (ps|chief|worker|evaluator):\d: cannot start "
                        rf"no-such-trainer on image {re.escape(IMAGE)}: not found in the "
                        r"task's PATH", done.stderr.strip().splitlines()[-1])
    assert engine.containers(label=RUN_LABEL) == []
