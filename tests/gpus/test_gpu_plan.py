"""GPUs in the plan, before anything starts (docs/gpus.md): the stand-in nvidia-smi
(tests/fake_gpu) on PATH; --dry-run, its JSON and over-asks as a user sees them."""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path

import pytest
from support import fake_gpus, run_launch

import launcher
from launcher.gpus import GpuError
from launcher.spec import Resources

SPEC = {"name": "gpus", "cluster": {"chief": 1, "worker": 2, "ps": 1}, "evaluator": "localhost",
        "command": [sys.executable, "-c", "pass"], "max_steps": 10}


def write(tmp_path: Path, **overrides) -> Path:
    doc = {**SPEC, "model_dir": str(tmp_path / "model"), "run_dir": str(tmp_path / "runs"),
           **overrides}
    path = tmp_path / "gpus.json"
    path.write_text(json.dumps(doc))
    return path


def with_gpus(tmp_path: Path, counts) -> dict[str, str]:
    return {"PATH": f"{fake_gpus(tmp_path, counts)}:{os.environ['PATH']}"}


def tasks_of(done) -> dict[str, dict]:
    assert done.returncode == 0, done.stderr
    return {f"{t['type']}:{t['index']}": t for t in json.loads(done.stdout)["tasks"]}


def test_defaults_split_the_gpus_among_trainers_and_keep_ps_and_evaluator_on_cpu(tmp_path):
    spec = write(tmp_path)
    tasks = tasks_of(run_launch(str(spec), "--dry-run", "--json",
                                env={**os.environ, **with_gpus(tmp_path, 4)}))
    visible = {name: t["env"].get("CUDA_VISIBLE_DEVICES") for name, t in tasks.items()}
    assert visible == {"ps:0": "", "chief:0": "0,1", "worker:0": "2", "worker:1": "3",
                       "evaluator:0": ""}
    assert {name: t["gpus"] for name, t in tasks.items()} == {
        "ps:0": [], "chief:0": ["0", "1"], "worker:0": ["2"], "worker:1": ["3"],
        "evaluator:0": []}
    text = run_launch(str(spec), "--dry-run", env={**os.environ, **with_gpus(tmp_path, 4)})
    assert "# GPUs on localhost: 4 GPUs (0, 1, 2, 3), found with nvidia-smi" in text.stdout
    assert [ln.split()[0] + " " + ln.split()[-1] for ln in text.stdout.splitlines()
            if "  gpus " in ln] == ["ps:0 none", "chief:0 0,1", "worker:0 2", "worker:1 3",
                                    "evaluator:0 none"]


def test_parameter_server_strategy_leaves_the_coordinator_on_cpu(tmp_path):
    spec = write(tmp_path, strategy="parameter_server", evaluator=None)
    tasks = tasks_of(run_launch(str(spec), "--dry-run", "--json",
                                env={**os.environ, **with_gpus(tmp_path, 2)}))
    assert {n: t["gpus"] for n, t in tasks.items()} == {
        "ps:0": [], "chief:0": [], "worker:0": ["0"], "worker:1": ["1"]}


def test_a_machine_without_nvidia_smi_sets_nothing(tmp_path):
    spec = write(tmp_path)
    path = ":".join(p for p in os.environ["PATH"].split(":")
                    if not os.path.exists(os.path.join(p, "nvidia-smi")))
    tasks = tasks_of(run_launch(str(spec), "--dry-run", "--json", env={**os.environ,
                                                                        "PATH": path}))
    for t in tasks.values():
        assert "CUDA_VISIBLE_DEVICES" not in t["env"] and t["gpus"] is None


def test_sharing_one_gpu_on_purpose(tmp_path):
    spec = write(tmp_path, resources={"default": {"gpu_share": True}})
    tasks = tasks_of(run_launch(str(spec), "--dry-run", "--json",
                                env={**os.environ, **with_gpus(tmp_path, 1)}))
    for name in ("chief:0", "worker:0", "worker:1"):
        assert tasks[name]["env"]["CUDA_VISIBLE_DEVICES"] == "0"
        assert tasks[name]["env"]["TF_FORCE_GPU_ALLOW_GROWTH"] == "true"
    assert tasks["ps:0"]["env"]["CUDA_VISIBLE_DEVICES"] == ""


def test_explicit_devices_and_counts(tmp_path):
    spec = write(tmp_path, resources={"worker": {"devices": ["3", "GPU-fa4e0000-0000-4000-8000"
                                                             "-000000000000"]},
                                      "evaluator": {"gpus": 1}})
    tasks = tasks_of(run_launch(str(spec), "--dry-run", "--json",
                                env={**os.environ, **with_gpus(tmp_path, 4)}))
    assert {n: t["gpus"] for n, t in tasks.items()} == {
        "ps:0": [], "chief:0": ["2"], "worker:0": ["3"],
        "worker:1": ["GPU-fa4e0000-0000-4000-8000-000000000000"], "evaluator:0": ["1"]}


def test_an_over_ask_is_refused_with_one_line_and_nothing_started(tmp_path):
    spec = write(tmp_path, resources={"worker": {"gpus": 2}})
    done = run_launch(str(spec), env={**os.environ, **with_gpus(tmp_path, 3)}, timeout=60)
    assert done.returncode == 2
    assert done.stderr.strip().splitlines() == [
        "launch: error: host localhost: worker:0 (2 GPUs), worker:1 (2 GPUs) ask for 4 GPUs, "
        "and it has 3 GPUs (0, 1, 2); nothing was started"]
    assert not (tmp_path / "runs").exists() and not (tmp_path / "model").exists()


def test_the_python_api_raises_the_same_error(tmp_path, monkeypatch):
    monkeypatch.setenv("PATH", with_gpus(tmp_path, 1)["PATH"])
    with pytest.raises(GpuError, match="no GPU '5'"):
        launcher.dry_run(str(write(tmp_path, resources={"chief": {"devices": ["5"]}})))


def test_docker_dry_run_gives_each_container_its_devices(tmp_path):
    spec = write(tmp_path, backend="docker", docker={"image": "tfcluster:test"},
                 model_dir="/data/m", run_dir=str(tmp_path / "runs"))
    done = run_launch(str(spec), "--dry-run", env={**os.environ, **with_gpus(tmp_path, 3)},
                      timeout=60)
    assert done.returncode == 0, done.stderr
    lines = {ln.split("--name ")[1].split()[0]: ln for ln in done.stdout.splitlines()
             if ln.startswith("docker run")}
    chief = next(ln for name, ln in lines.items() if name.endswith("-chief-0"))
    ps = next(ln for name, ln in lines.items() if name.endswith("-ps-0"))
    worker1 = next(ln for name, ln in lines.items() if name.endswith("-worker-1"))
    assert "--gpus '\"device=0\"'" in chief and "--env CUDA_VISIBLE_DEVICES=0 " in chief
    assert "--gpus '\"device=2\"'" in worker1 and "--env CUDA_VISIBLE_DEVICES=0 " in worker1
    assert "--gpus" not in ps and "--env NVIDIA_VISIBLE_DEVICES=void" in ps


def test_slurm_and_ssh_dry_runs_leave_the_devices_to_later(tmp_path):
    env = {**os.environ, **with_gpus(tmp_path, 4)}
    ssh = tasks_of(run_launch(str(write(tmp_path, backend="ssh")), "--dry-run", "--json",
                              env=env))
    assert all(t["gpus"] is None for t in ssh.values())
    text = run_launch(str(write(tmp_path, backend="ssh")), "--dry-run", env=env).stdout
    assert "# GPUs: each host's are found with nvidia-smi when the job starts" in text
    slurm = write(tmp_path, backend="slurm", resources={"worker": {"gpus": 1}})
    done = run_launch(str(slurm), "--dry-run", env=env)
    assert done.returncode == 0, done.stderr
    assert "--gpus=1" in done.stdout and "CUDA_VISIBLE_DEVICES" not in done.stdout


def test_a_slurm_step_says_which_devices_slurm_bound(tmp_path):
    """The wrapper a Slurm step with GPUs runs (launcher/backends/slurm_gpus.py), run here as
    srun would: its first line sets the task's gpus; the task's own arguments arrive
    untouched."""
    import subprocess

    from launcher.backends.slurm_gpus import StepDevices, reporting_step
    from launcher.plan import TaskPlan

    task = TaskPlan("worker", 0, "n1", 2222, [sys.executable, "-c",
                                               "import sys; print(sys.argv[1:])", "a b", "$X"],
                    {}, resources=Resources(gpus=2))
    step = reporting_step(task)
    proc = subprocess.Popen(step.command, stdout=subprocess.PIPE,
                            env={**os.environ, "CUDA_VISIBLE_DEVICES": "1,3"})
    from launcher.output.task_output import pump

    lines: list[str] = []
    pump(StepDevices(proc.stdout, task), lambda data: None,
         lambda text, partial: lines.append(text), time.monotonic)   # as the job loop reads
    proc.wait()
    assert task.gpus == ["1", "3"]
    assert lines == ["tfcluster: the Slurm step's CUDA_VISIBLE_DEVICES=1,3", "['a b', '$X']"]
    cpu = TaskPlan("ps", 0, "n1", 2223, ["x"], {}, resources=Resources())
    assert reporting_step(cpu) is cpu


def test_device_lists_are_refused_where_the_engine_binds_gpus(tmp_path):
    spec = write(tmp_path, backend="slurm", resources={"worker": {"devices": ["0", "1"]}})
    done = run_launch(str(spec), "--dry-run", timeout=60)
    assert done.returncode == 2
    assert done.stderr.strip().splitlines() == [
        "launch: error: resources.worker.devices: backend 'slurm' binds GPUs itself: give "
        "resources.ROLE.gpus (a count); devices and gpu_share are for local, ssh and docker "
        "(docs/gpus.md)"]
    local = run_launch(str(spec), "--dry-run", "--local", timeout=60,
                       env=with_gpus(tmp_path, 2))
    assert local.returncode == 0, local.stderr
