"""docker/: the compose file against the Compose Specification schema and the launcher's own
plan, and the Dockerfile against the repository, without an engine. The image is built and
run, and the compose file run, on a real engine in tests/docker/ (docs/docker.md)."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import jsonschema
import yaml

REPO = Path(__file__).resolve().parents[2]
DOCKER = REPO / "docker"
COMPOSE_SCHEMA = json.loads((Path(__file__).parent / "schemas" / "compose-spec.json").read_text())


def compose_from_spec(*args: str, stdin: str | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(DOCKER / "compose_from_spec.py"), *args],
                          cwd=REPO, input=stdin, capture_output=True, text=True, timeout=120)


def load_compose() -> dict:
    return yaml.safe_load((DOCKER / "docker-compose.yml").read_text())


def test_compose_file_is_what_the_generator_makes_of_the_spec():
    done = compose_from_spec("docker/cluster.json")
    assert done.returncode == 0, done.stderr
    assert done.stdout == (DOCKER / "docker-compose.yml").read_text(), \
        "docker/docker-compose.yml is stale: regenerate it (header line 2)"


def test_compose_file_passes_the_compose_schema():
    validator = jsonschema.Draft7Validator(COMPOSE_SCHEMA)
    doc = load_compose()
    assert not [e.message for e in validator.iter_errors(doc)]
    doc["services"]["chief"]["enviroment"] = {}
    assert not validator.is_valid(doc), "the schema rejects an unknown service key"


def test_every_service_is_a_task_whose_cluster_names_the_other_services():
    doc = load_compose()
    services = doc["services"]
    assert set(services) == {"chief", "worker-0", "worker-1", "ps-0", "evaluator"}
    spec = json.loads((DOCKER / "cluster.json").read_text())
    for name, service in services.items():
        env = service["environment"]
        cfg = json.loads(env["TF_CONFIG"])
        task = cfg["task"]
        assert name == (task["type"] if task["type"] in ("chief", "evaluator")
                        else f"{task['type']}-{task['index']}")
        assert env["TFCLUSTER_TASK"] == f"{task['type']}:{task['index']}"
        assert service["hostname"] == name
        for addresses in cfg["cluster"].values():   # every peer is a service, on its port
            for address in addresses:
                host, port = address.rsplit(":", 1)
                assert host in services and port in services[host]["expose"]
        assert "evaluator" not in cfg["cluster"]
        assert service["volumes"] == ["model:/shared"]
        assert env["TFCLUSTER_MODEL_DIR"] == spec["model_dir"]
        assert service["command"] == spec["command"]
        assert service["build"] == {"context": "..", "dockerfile": "docker/Dockerfile"}
    shards = sorted(s["environment"].get("TFCLUSTER_SHARD_INDEX", "-") for s in
                    services.values())
    assert shards == ["-", "-", "0", "1", "2"]
    assert services["ps-0"]["stop_signal"] == "SIGTERM"


def test_secrets_become_references_and_dollars_stay_literal(tmp_path):
    plan = json.loads(subprocess.run(
        [str(Path(sys.executable).parent / "launch"), str(DOCKER / "cluster.json"),
         "--dry-run", "--json"], capture_output=True, text=True, check=True).stdout)
    for task in plan["tasks"]:
        task["env"].update({"AWS_SECRET_ACCESS_KEY": "***", "PRICE": "$5"})
    done = compose_from_spec("-", stdin=json.dumps(plan))
    assert done.returncode == 0, done.stderr
    env = yaml.safe_load(done.stdout)["services"]["chief"]["environment"]
    assert env["AWS_SECRET_ACCESS_KEY"] == "${AWS_SECRET_ACCESS_KEY}"
    assert env["PRICE"] == "$$5"


def test_tasks_sharing_a_host_cannot_be_services(tmp_path):
    spec = json.loads((DOCKER / "cluster.json").read_text())
    spec["cluster"]["worker"] = ["chief:2223"]
    path = tmp_path / "spec.json"
    path.write_text(json.dumps(spec))
    done = compose_from_spec(str(path))
    assert done.returncode != 0
    assert "worker:0 shares host 'chief'" in done.stderr


def test_dockerfile_copies_what_exists_and_matches_the_tested_tensorflow():
    text = (DOCKER / "Dockerfile").read_text()
    for line in re.findall(r"^COPY (.+)$", text, re.MULTILINE):
        for source in line.split()[:-1]:
            assert (REPO / source).exists(), f"COPY {source}: not in the repository"
    stages = re.findall(r"^FROM \S+ AS (\S+)$", text, re.MULTILINE)
    assert stages == ["runtime", "ssh-host"]
    default_tf = re.search(r"^ARG TF_VERSION=(\S+)$", text, re.MULTILINE).group(1)
    setup = (REPO / "scripts" / "setup.sh").read_text()
    assert f'"tensorflow-cpu=={default_tf}"' in setup, "image and .venv use one TF version"
    ignored = (DOCKER / "Dockerfile.dockerignore").read_text().split()
    assert {".venv", ".venv-tf2", ".git"} <= set(ignored)
    spec = json.loads((DOCKER / "cluster.json").read_text())
    assert (REPO / spec["command"][1]).exists()   # the example the services run is copied
