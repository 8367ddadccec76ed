"""The docker backend without an engine: its spec section, the exact ``docker run`` lines
of --dry-run, exit statuses, and a missing engine refused before anything starts."""

from __future__ import annotations

import json
import shlex
import signal

import pytest
from docker_support import IMAGE, docker_spec
from support import run_launch

from launcher.backends.docker import exit_status


def dry_run(tmp_path, spec: dict, *extra: str):
    path = tmp_path / "spec.json"
    path.write_text(json.dumps(spec))
    return run_launch(str(path), "--dry-run", *extra, timeout=60)


def docker_lines(stdout: str) -> dict[str, list[str]]:
    """The task's ``docker run`` argv by task name (its --label tfcluster.task)."""
    out = {}
    for line in stdout.splitlines():
        if " run --rm --init " in line and not line.startswith("#"):
            argv = shlex.split(line)
            out[argv[argv.index("--label", argv.index("--label") + 1) + 1].split("=")[1]] = argv
    return out


def test_dry_run_prints_each_task_s_exact_docker_run_line_without_values(tmp_path):
    spec = docker_spec("/data/m", ["/data:/data", "cache:/root/.cache:ro"],
                       env={"AWS_SECRET_ACCESS_KEY": "hunter2"},
                       resources={"worker": {"cpus": 2, "memory": "2Gi"}})
    done = dry_run(tmp_path, spec)
    assert done.returncode == 0, done.stderr
    assert "hunter2" not in done.stdout
    lines = docker_lines(done.stdout)
    assert sorted(lines) == ["chief:0", "evaluator:0", "ps:0", "worker:0", "worker:1"]
    run_id = done.stdout.split("  run ", 1)[1].split()[0]
    argv = lines["worker:1"]
    assert argv[:7] == ["docker", "run", "--rm", "--init", "--name", f"tfc-{run_id}-worker-1",
                        "--label"]
    assert f"tfcluster.run={run_id}" in argv and argv[argv.index("--network") + 1] == "host"
    mounts = [argv[i + 1] for i, a in enumerate(argv) if a == "--mount"]
    assert mounts == ["type=bind,src=/data,dst=/data",
                      "type=volume,src=cache,dst=/root/.cache,readonly"]
    assert argv[argv.index("--cpus") + 1] == "2" and argv[argv.index("--memory") + 1] == "2g"
    names = [argv[i + 1] for i, a in enumerate(argv) if a == "--env"]
    assert {"TF_CONFIG", "TFCLUSTER_RUN_ID", "AWS_SECRET_ACCESS_KEY"} <= set(names)
    assert all("=" not in n for n in names)          # values come from the client's env
    tail = argv[argv.index(IMAGE):]
    assert tail == [IMAGE, "python", "examples/estimator/train.py", "--save-steps", "100"]
    assert "--cpus" not in lines["ps:0"]


def test_on_a_user_network_every_task_is_reachable_by_its_host_name(tmp_path):
    spec = docker_spec("/data/m", cluster={"chief": ["chief"], "worker": ["w0", "w1"],
                                           "ps": ["ps0"]}, evaluator="ev",
                       docker={"image": IMAGE, "network": "tfnet"})
    done = dry_run(tmp_path, spec, "--json")
    assert done.returncode == 0, done.stderr
    plan = json.loads(done.stdout)
    cluster = json.loads(plan["tasks"][0]["env"]["TF_CONFIG"])["cluster"]
    assert cluster == {"chief": ["chief:2222"], "worker": ["w0:2222", "w1:2222"],
                       "ps": ["ps0:2222"]}
    assert "network create --label tfcluster.run=" in plan["rendered"]
    argv = docker_lines(plan["rendered"])["worker:1"]
    i = argv.index("--network")
    assert argv[i:i + 6] == ["--network", "tfnet", "--hostname", "w1", "--network-alias", "w1"]


@pytest.mark.parametrize("section, message", [
    ({"volumes": ["data"]}, "docker.volumes[0]: 'data' must be SOURCE:TARGET"),
    ({"volumes": ["/a:rel"]}, "docker.volumes[0]: target 'rel' must be an absolute path"),
    ({"volumes": ["/a:/m", "/b:/m/"]}, "docker.volumes[1]: target '/m' is mounted twice"),
    ({"volumes": ["/a:/b:rx"]}, "docker.volumes[0]: '/a:/b:rx' must be SOURCE:TARGET"),
    ({"volumes": ["a b:/c"]}, "docker.volumes[0]: 'a b:/c' must be one word"),
    ({"network": "my net"}, "docker.network: 'my net' must be one word"),
    ({"network": "a/b"}, "docker.network: 'a/b' is not a network name"),
    ({"image": "--privileged"}, "docker.image: '--privileged' must be one word"),
    ({"imagee": "x"}, "docker.imagee: unknown key"),
])
def test_a_bad_docker_section_is_one_clear_line_and_exit_2(tmp_path, section, message):
    done = dry_run(tmp_path, docker_spec("/data/m", docker=section))
    assert done.returncode == 2
    assert message in done.stderr
    assert len(done.stderr.strip().splitlines()) == 1


def test_no_engine_is_refused_before_anything_starts(tmp_path):
    path = tmp_path / "spec.json"
    path.write_text(json.dumps(docker_spec(str(tmp_path / "m"))))
    done = run_launch(str(path), "--run-dir", str(tmp_path / "run"), timeout=60,
                      env={"DOCKER_HOST": f"unix://{tmp_path}/no-engine.sock"})
    assert done.returncode == 2
    assert "docker: cannot reach the Docker engine at unix://" in done.stderr
    assert len(done.stderr.strip().splitlines()) == 1
    assert not (tmp_path / "m").exists()


def test_a_container_killed_by_a_signal_reads_as_that_signal():
    assert exit_status(137) == -signal.SIGKILL
    assert exit_status(143) == -signal.SIGTERM
    assert [exit_status(c) for c in (0, 1, 125, 127, 128)] == [0, 1, 125, 127, 128]


def test_the_launcher_reads_model_dir_through_the_bind_mount_that_holds_it():
    from launcher.api import validate
    from launcher.backends.docker import DockerBackend

    spec = validate(docker_spec("/shared/model", ["/data/runs:/shared", "/fast:/shared/model/x"]))
    backend = DockerBackend(DockerBackend.validate_options(spec.backend_options["docker"],
                                                           "docker"))
    assert backend.launcher_view("/shared/model") == "/data/runs/model"
    assert backend.launcher_view("/shared/model/x/y") == "/fast/y"       # the deepest mount
    assert backend.launcher_view("/shared") == "/data/runs"
    assert backend.launcher_view("/sharedx/model") is None               # not under /shared
    assert backend.launcher_view("s3://bucket/model") is None
    assert backend.launcher_view("runs/model") is None
