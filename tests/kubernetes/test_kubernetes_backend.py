"""The kubernetes backend: rendered objects against the real schemas, the TF_CONFIG every pod
gets through TensorFlow's own parsers, and `launch` against a kubectl that replays recorded
responses (no API server can run here)."""

from __future__ import annotations

import copy
import json
import os
import re
import shutil
import subprocess
from pathlib import Path

import jsonschema
import pytest
import yaml
from support import PY_TF215, PY_TF221, run_launch

HERE = Path(__file__).parent
SCHEMAS = HERE / "schemas"
K8S = json.loads((SCHEMAS / "k8s-v1.30.0-strict-subset.json").read_text())
TFJOB_CRD = json.loads((SCHEMAS / "tfjob-v1-crd-training-operator-v1.9.0.json").read_text())
COMPLETION_INDEX = "metadata.annotations['batch.kubernetes.io/job-completion-index']"
INDEX_FIELDS = {"tfjob": "metadata.labels['training.kubeflow.org/replica-index']",
                "plain": COMPLETION_INDEX, "jobset": COMPLETION_INDEX}
RESTART_ATTEMPT = "metadata.labels['jobset.sigs.k8s.io/restart-attempt']"   # JobSet's


def strict(schema):
    """kubectl --validate=strict on a structural CRD schema: unknown fields are errors."""
    if isinstance(schema, list):
        return [strict(s) for s in schema]
    if not isinstance(schema, dict):
        return schema
    out = {k: strict(v) for k, v in schema.items()}
    if ("properties" in out and "additionalProperties" not in out
            and not out.get("x-kubernetes-preserve-unknown-fields")):
        out["additionalProperties"] = False
    return out


def validator(kind: str) -> jsonschema.Validator:
    if kind == "TFJob":
        return jsonschema.Draft202012Validator(strict(TFJOB_CRD))
    name = {"Job": "io.k8s.api.batch.v1.Job", "Service": "io.k8s.api.core.v1.Service"}[kind]
    return jsonschema.Draft202012Validator({"$defs": K8S["$defs"], "$ref": f"#/$defs/{name}"})


def write_spec(tmp_path: Path, mode: str, **overrides) -> Path:
    spec = {
        "name": "ctr_Train",
        "cluster": {"chief": 1, "worker": 2, "ps": 2},
        "evaluator": "localhost",
        "command": ["python", "examples/estimator/train.py", "--save-steps", "100"],
        "model_dir": "s3://models/ctr",
        "max_steps": 3000,
        "backend": "kubernetes",
        "workdir": "/opt/tfcluster",
        "check_storage": False,
        "env": {"AWS_SECRET_ACCESS_KEY": "s3cret", "GREETING": "cost $(not a var)"},
        "resources": {"default": {"cpus": 2, "memory": "4G"}, "worker": {"gpus": 1},
                      "ps": {"memory": "8Gi"}},
        "kubernetes": {"image": "registry.example.com/tfcluster:tf2.15", "namespace": "ml",
                       "mode": mode, "service_account": "trainer",
                       "image_pull_policy": "Always", "node_selector": {"pool": "cpu"},
                       "image_pull_secrets": ["regcred"], "env_from_secrets": ["s3-creds"]},
    }
    spec.update(overrides)
    path = tmp_path / "spec.json"
    path.write_text(json.dumps(spec))
    return path


def rendered(tmp_path: Path, mode: str, **overrides) -> tuple[dict, list[dict]]:
    done = run_launch(str(write_spec(tmp_path, mode, **overrides)), "--dry-run", "--json")
    assert done.returncode == 0, done.stderr
    doc = json.loads(done.stdout)
    return doc, [d for d in yaml.safe_load_all(doc["rendered"]) if d]


# ---------------------------------------------------------------- schemas
@pytest.mark.parametrize("mode, kinds", [("tfjob", ["TFJob"]),
                                         ("plain", ["Service", "Job"] * 4)])
def test_rendered_objects_pass_the_real_schemas(tmp_path, mode, kinds):
    _, objects = rendered(tmp_path, mode)
    assert [o["kind"] for o in objects] == kinds
    for obj in objects:
        errors = [e.message for e in validator(obj["kind"]).iter_errors(obj)]
        assert not errors, f"{obj['kind']} {obj['metadata']['name']}: {errors[:3]}"


def test_the_schemas_catch_a_misspelt_field(tmp_path):
    """The check above can fail: a typo deep in the pod template is an error."""
    _, (tfjob,) = rendered(tmp_path, "tfjob")
    bad = copy.deepcopy(tfjob)
    bad["spec"]["tfReplicaSpecs"]["PS"]["template"]["spec"]["containers"][0]["imagePullPolcy"] = "x"
    assert not validator("TFJob").is_valid(bad)
    _, objects = rendered(tmp_path, "plain")
    job = copy.deepcopy(next(o for o in objects if o["kind"] == "Job"))
    job["spec"]["completionMode"] = 3
    assert not validator("Job").is_valid(job)


def test_tfjob_keeps_no_ps_running_after_success(tmp_path):
    _, (tfjob,) = rendered(tmp_path, "tfjob")
    spec = tfjob["spec"]
    assert spec["runPolicy"]["cleanPodPolicy"] == "Running"   # the ps pods are deleted
    assert spec["successPolicy"] == ""                       # ... once the chief succeeded
    assert set(spec["tfReplicaSpecs"]) == {"Chief", "Worker", "PS", "Evaluator"}
    assert spec["tfReplicaSpecs"]["Worker"]["replicas"] == 2
    ps = spec["tfReplicaSpecs"]["PS"]["template"]["spec"]
    assert ps["containers"][0]["resources"]["limits"]["memory"] == "8Gi"
    worker = spec["tfReplicaSpecs"]["Worker"]["template"]["spec"]["containers"][0]
    assert worker["resources"]["limits"]["nvidia.com/gpu"] == "1"
    env = {e["name"]: e.get("value") for e in worker["env"]}
    assert "TF_CONFIG" not in env, "the operator sets TF_CONFIG"
    assert env["AWS_SECRET_ACCESS_KEY"] == "***", "--dry-run never prints a secret"


# ---------------------------------------------------------------- TF_CONFIG per pod
def kubelet_env(env: list[dict], fields: dict[str, str]) -> dict[str, str]:
    """What the kubelet makes of a container's env: fieldRefs resolved, $(VAR) of earlier
    variables expanded, $$ reduced to $."""
    out: dict[str, str] = {}
    for item in env:
        if "valueFrom" in item:
            out[item["name"]] = fields[item["valueFrom"]["fieldRef"]["fieldPath"]]
            continue
        out[item["name"]] = kubelet_expand(item["value"], out)
    return out


def kubelet_expand(text: str, env: dict[str, str]) -> str:
    """$(VAR) of ``env`` expanded, $$ reduced to $, as the kubelet does for env and command."""
    return re.sub(r"\$\$|\$\(([A-Za-z_][A-Za-z0-9_]*)\)",
                  lambda m: "$" if m.group(0) == "$$" else env.get(m.group(1), m.group(0)),
                  text)


def shard_index(container: dict, env: dict[str, str]) -> str | None:
    """TFCLUSTER_SHARD_INDEX as the container's command leaves it (run with a real sh)."""
    command = container["command"]
    if command[:2] != ["/bin/sh", "-c"]:
        return env.get("TFCLUSTER_SHARD_INDEX")
    probe = command[:4] + ["printenv", "TFCLUSTER_SHARD_INDEX"]
    done = subprocess.run(probe, env=env, capture_output=True, text=True, check=True)
    return done.stdout.strip()


def operator_tf_config(tfjob: dict, rtype: str, index: int) -> str:
    """TF_CONFIG as the training operator (v1.9.0, genTFConfigJSONStr) builds it: every
    replica type in the cluster, evaluator included, and "environment": "cloud"."""
    name, ns = tfjob["metadata"]["name"], tfjob["metadata"]["namespace"]
    cluster = {}
    for rt, replica in tfjob["spec"]["tfReplicaSpecs"].items():
        ports = replica["template"]["spec"]["containers"][0]["ports"]
        port = next(p["containerPort"] for p in ports if p["name"] == "tfjob-port")
        cluster[rt.lower()] = [f"{name}-{rt.lower()}-{i}.{ns}.svc:{port}"
                               for i in range(replica["replicas"])]
    return json.dumps({"cluster": cluster, "task": {"type": rtype.lower(), "index": index},
                       "environment": "cloud"})


def pods(mode: str, objects: list[dict]) -> list[dict]:
    """Every pod the objects make (a TFJob's, indexed Jobs', a JobSet's, each at its first
    start): its DNS name, the env it gets, its shard index."""
    out = []
    for obj in objects:
        name, ns = obj["metadata"]["name"], obj["metadata"]["namespace"]
        if obj["kind"] == "TFJob":
            templates = [(rt.lower(), r["replicas"], r["template"]["spec"])
                         for rt, r in obj["spec"]["tfReplicaSpecs"].items()]
        elif obj["kind"] == "Job":
            templates = [(obj["metadata"]["labels"]["tfcluster.io/role"],
                          obj["spec"]["completions"], obj["spec"]["template"]["spec"])]
        elif obj["kind"] == "JobSet":
            templates = [(r["name"], r["template"]["spec"]["completions"],
                          r["template"]["spec"]["template"]["spec"])
                         for r in obj["spec"]["replicatedJobs"]]
        else:
            continue
        for role, count, pod_spec in templates:
            container = pod_spec["containers"][0]
            for i in range(count):
                env = kubelet_env(container["env"],
                                  {INDEX_FIELDS[mode]: str(i), RESTART_ATTEMPT: "0"})
                if mode == "tfjob":
                    env["TF_CONFIG"] = operator_tf_config(obj, role, i)
                    host = f"{name}-{role}-{i}.{ns}"
                elif mode == "jobset":   # JOBSET-RJOB-0-INDEX in the JobSet's subdomain
                    host = f"{name}-{role}-0-{i}.{name}.{ns}"
                else:   # an indexed Job's pod is JOB-INDEX in the Service named by subdomain
                    host = f"{name}-{i}.{pod_spec['subdomain']}.{ns}"
                out.append({"role": role, "index": i, "dns": f"{host}.svc", "env": env,
                            "shard": shard_index(container, env)})
    return out


@pytest.mark.parametrize("mode", ["tfjob", "plain"])
def test_each_pod_expands_its_own_task_variables(tmp_path, mode):
    """$(TFCLUSTER_TASK_INDEX) in a command or an env value is the pod's own index: the
    kubelet expands it, per pod, from the pod's env."""
    _, objects = rendered(
        tmp_path, mode,
        command=["python", "t.py", "--job_name=$(TFCLUSTER_TASK_TYPE)",
                 "--task_index=$(TFCLUSTER_TASK_INDEX)", "--ps_hosts=$(TFCLUSTER_PS_HOSTS)"],
        env={"TASK_INDEX": "$(TFCLUSTER_TASK_INDEX)", "GREETING": "cost $$(not a var)"},
        roles={"ps": {"command": ["python", "ps.py", "$(TFCLUSTER_TASK)"]}})
    made = pods(mode, objects)
    assert len(made) == 6
    for obj in objects:
        if obj["kind"] not in ("TFJob", "Job"):
            continue
        specs = ([(rt.lower(), r["template"]["spec"]) for rt, r in
                  obj["spec"]["tfReplicaSpecs"].items()] if obj["kind"] == "TFJob" else
                 [(obj["metadata"]["labels"]["tfcluster.io/role"],
                   obj["spec"]["template"]["spec"])])
        for role, pod_spec in specs:
            container = pod_spec["containers"][0]
            for pod in (p for p in made if p["role"] == role):
                env = pod["env"]
                argv = [kubelet_expand(a, env) for a in container["command"]]
                i = pod["index"]
                assert env["TASK_INDEX"] == str(i) and env["GREETING"] == "cost $(not a var)"
                if role == "ps":
                    assert argv[-1] == f"ps:{i}"
                else:
                    assert f"--task_index={i}" in argv and f"--job_name={role}" in argv
                    assert f"--ps_hosts={env['TFCLUSTER_PS_HOSTS']}" in argv


PARSE_TF221 = """
import json, os, sys
import tensorflow as tf
out = []
for cfg in json.load(sys.stdin):
    os.environ["TF_CONFIG"] = cfg
    r = tf.distribute.cluster_resolver.TFConfigClusterResolver()
    out.append({"type": r.task_type, "index": r.task_id, "cluster": r.cluster_spec().as_dict()})
print(json.dumps(out))
"""
PARSE_TF215 = """
import json, os, sys
import tensorflow as tf
out = []
for cfg in json.load(sys.stdin):
    os.environ["TF_CONFIG"] = cfg
    c = tf.estimator.RunConfig()
    out.append({"type": c.task_type, "index": c.task_id, "chief": c.is_chief,
                "workers": c.num_worker_replicas, "ps": c.num_ps_replicas})
print(json.dumps(out))
"""


def parse_with(python: str, code: str, configs: list[str]) -> list[dict]:
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3")
    done = subprocess.run([python, "-c", code], input=json.dumps(configs), env=env,
                          capture_output=True, text=True, timeout=240)
    assert done.returncode == 0, done.stderr[-2000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


@pytest.mark.tf
def test_every_pods_tf_config_is_accepted_by_tensorflow(tmp_path):
    """The pods of every mode (tfjob, plain, and jobset: its own pods are checked in
    tests/kubernetes/test_jobset.py) through TensorFlow's parsers: one process per version
    reads every pod's TF_CONFIG."""
    all_pods = []
    for mode in ("tfjob", "plain"):
        (tmp_path / mode).mkdir()
        _, objects = rendered(tmp_path / mode, mode)
        made = pods(mode, objects)
        assert sorted((p["role"], p["index"]) for p in made) == [
            ("chief", 0), ("evaluator", 0), ("ps", 0), ("ps", 1), ("worker", 0), ("worker", 1)]
        shards = {(p["role"], p["index"]): p["shard"] for p in made}
        assert shards == {("chief", 0): "0", ("worker", 0): "1", ("worker", 1): "2",
                          ("ps", 0): None, ("ps", 1): None, ("evaluator", 0): None}
        all_pods += made
    for pod in all_pods:
        cfg = json.loads(pod["env"]["TF_CONFIG"])
        assert cfg["task"] == {"type": pod["role"], "index": pod["index"]}
        if pod["role"] in cfg["cluster"]:   # the address TF uses is the pod's own DNS name
            assert cfg["cluster"][pod["role"]][pod["index"]] == f"{pod['dns']}:2222"
        assert pod["env"]["TFCLUSTER_TASK"] == f"{pod['role']}:{pod['index']}"
        assert pod["env"]["GREETING"] == "cost $(not a var)"
    (tmp_path / "jobset").mkdir()
    all_pods += pods("jobset", rendered(tmp_path / "jobset", "jobset")[1])

    configs = [p["env"]["TF_CONFIG"] for p in all_pods]
    for pod, got in zip(all_pods, parse_with(PY_TF221, PARSE_TF221, configs), strict=True):
        cluster = json.loads(pod["env"]["TF_CONFIG"])["cluster"]
        assert (got["type"], got["index"]) == (pod["role"], pod["index"])
        assert got["cluster"]["ps"] == cluster["ps"]
        assert got["cluster"]["worker"] == cluster["worker"]
    for pod, got in zip(all_pods, parse_with(PY_TF215, PARSE_TF215, configs), strict=True):
        assert (got["type"], got["index"]) == (pod["role"], pod["index"])
        assert got["chief"] == (pod["role"] == "chief")
        if pod["role"] != "evaluator":
            assert (got["workers"], got["ps"]) == (3, 2)


# ---------------------------------------------------------------- launch through kubectl
def small_spec(tmp_path: Path) -> Path:
    return write_spec(tmp_path, "tfjob", name="k8s-est", evaluator=None,
                      cluster={"chief": 1, "worker": 1, "ps": 1},
                      model_dir=str(tmp_path / "model"), env={"API_TOKEN": "s3cret"})


def calls(state: Path) -> list[list[str]]:
    return [json.loads(line) for line in (state / "calls.jsonl").read_text().splitlines()]


def test_launch_applies_follows_pods_stops_the_ps_and_cleans_up(tmp_path, fake_kubectl):
    env, state, use = fake_kubectl
    use("tfjob_success.json")
    run_dir = tmp_path / "run"
    done = run_launch(str(small_spec(tmp_path)), "--run-dir", str(run_dir), env=env,
                      timeout=120)
    assert done.returncode == 0, done.stderr
    applied = [d for d in yaml.safe_load_all((state / "applied.yaml").read_text()) if d]
    assert [d["kind"] for d in applied] == ["TFJob"]
    assert validator("TFJob").is_valid(applied[0])
    assert "s3cret" in (state / "applied.yaml").read_text(), "the cluster gets the real value"
    assert "s3cret" not in done.stdout + done.stderr
    made = calls(state)
    assert ["delete", "pod", "k8s-est-ps-0", "-n", "ml", "--ignore-not-found",
            "--wait=false"] in made, "the ps is stopped once training ended"
    assert made[-1][:2] == ["delete", "tfjob"] and "tfcluster.io/job=k8s-est" in made[-1]
    summary = json.loads((run_dir / "summary.json").read_text())
    exits = {t["task"]: (t["exit"], t["stopped"]) for t in summary["tasks"]}
    assert exits == {"chief:0": (0, False), "worker:0": (0, False), "ps:0": (-15, True)}
    assert "Loss for final step" in (run_dir / "logs" / "chief-0.log").read_text()
    assert "loss = 0.69" in (run_dir / "logs" / "chief-0.log").read_text()
    assert "[chief:0] INFO:tensorflow:Loss for final step: 0.41." in done.stdout   # streamed


def test_a_failed_pod_fails_the_job_and_deletes_it(tmp_path, fake_kubectl):
    env, state, use = fake_kubectl
    use("tfjob_worker_fails.json")
    done = run_launch(str(small_spec(tmp_path)), "--run-dir", str(tmp_path / "run"), env=env,
                      timeout=120)
    assert done.returncode == 1
    assert "worker:0 failed with exit status 1" in done.stderr
    assert "ValueError: bad input" in done.stderr
    assert calls(state)[-1][:2] == ["delete", "tfjob"]


def test_without_a_configured_kubectl_nothing_is_applied(tmp_path, fake_kubectl):
    env, state, use = fake_kubectl
    use("tfjob_success.json", no_context=True)
    done = run_launch(str(small_spec(tmp_path)), env=env, timeout=60)
    assert done.returncode == 2
    assert "no Kubernetes cluster configured for kubectl" in done.stderr
    assert not (state / "applied.yaml").exists()


def test_the_plan_has_the_pods_and_the_spec_stays_as_given(tmp_path):
    """The backend places each task at its pod while the plan is built; it never sees,
    let alone rewrites, the spec."""
    from launcher import api
    from launcher.api import load_spec

    path = str(write_spec(tmp_path, "jobset"))
    spec, backend = api.prepare(path)
    plan = api.make_plan(spec, backend, None)
    assert spec == load_spec(path)
    assert (plan.task("worker", 1).host, plan.task("worker", 1).port) == \
        ("ctr-train-worker-0-1.ctr-train.ml.svc", 2222)
    assert plan.task("evaluator").host == "ctr-train-evaluator-0-0.ctr-train.ml.svc"


def test_without_kubectl_at_all(tmp_path):
    kubectl_free = {"PATH": os.path.dirname(shutil.which("sh") or "/bin/sh")}
    done = run_launch(str(small_spec(tmp_path)), env=kubectl_free, timeout=60)
    assert done.returncode == 2
    assert "kubectl" in done.stderr


@pytest.mark.parametrize("options, message", [
    ({"mode": "helm"}, "kubernetes.mode: must be one of tfjob, plain"),
    ({"namspace": "ml"}, "kubernetes.namspace: unknown key"),
    ({"namespace": "ML team"}, "kubernetes.namespace"),
    ({"image_pull_policy": "always"}, "kubernetes.image_pull_policy"),
    ({"env_from_secrets": "creds"}, "kubernetes.env_from_secrets"),
])
def test_bad_kubernetes_options_exit_2(tmp_path, options, message):
    done = run_launch(str(write_spec(tmp_path, "tfjob", kubernetes=options)), "--dry-run")
    assert done.returncode == 2
    assert message in done.stderr


def test_restart_policies_are_refused(tmp_path):
    spec = write_spec(tmp_path, "tfjob", restart={"worker": "on-failure"})
    done = run_launch(str(spec), "--dry-run")
    assert done.returncode == 2
    assert "restart.worker" in done.stderr


def test_the_registry_says_what_a_kubernetes_run_can_do():
    """TFJob and JobSet end the job themselves: in those modes the registry gives
    ``--detach`` a submitter (the job handed over); plain Jobs need the launcher to stop
    the ps, so in mode plain there is none (a detached run keeps its launcher, as a
    daemon). Every mode is an EngineJob (its objects are the run's handle), and its runs
    are followed by their handle. One class per mode: no class is swapped by option."""
    from launcher.backends import following, submitter
    from launcher.backends.engine import EngineJob, Follower
    from launcher.backends.kubernetes import KubernetesBackend, KubernetesOptions
    from launcher.backends.kubernetes_submit import KubernetesSubmitter

    for mode, submits in (("tfjob", True), ("jobset", True), ("plain", False)):
        backend = KubernetesBackend(KubernetesOptions(mode=mode))
        assert type(backend) is KubernetesBackend and backend.options.mode == mode
        assert isinstance(submitter(backend), KubernetesSubmitter) is submits, mode
        assert isinstance(backend, EngineJob)
    assert issubclass(following("kubernetes"), Follower)
    assert following("kubernetes").describe_handle(
        {"kubernetes": {"kind": "jobset", "name": "ctr", "namespace": "ml"}}) == \
        "jobset ctr in namespace ml"


@pytest.mark.parametrize("cluster", [{"worker": 3}, {"chief": 1, "worker": 2}])
def test_keras_jax_gives_each_pod_its_own_process_id(tmp_path, cluster):
    """"keras": "jax" (docs/keras.md): one template per role, each pod its place among
    JAX's processes, as the kubelet and the container's shell make it."""
    _, objects = rendered(tmp_path, "jobset", cluster=cluster, keras="jax", evaluator=None)
    ids = []
    for pod in pods("jobset", objects):
        container = next(r["template"]["spec"]["template"]["spec"]["containers"][0]
                         for o in objects if o["kind"] == "JobSet"
                         for r in o["spec"]["replicatedJobs"] if r["name"] == pod["role"])
        command = container["command"]
        if command[:2] == ["/bin/sh", "-c"]:
            probe = command[:4] + ["printenv", "KERAS_DISTRIBUTION_PROCESS_ID"]
            done = subprocess.run(probe, env=pod["env"], capture_output=True, text=True,
                                  check=True)
            ids.append(done.stdout.strip())
        else:
            ids.append(pod["env"]["KERAS_DISTRIBUTION_PROCESS_ID"])
        assert pod["env"]["KERAS_DISTRIBUTION_NUM_PROCESSES"] == "3"
        assert pod["env"]["KERAS_DISTRIBUTION_JOB_ADDRESSES"].count(",") == 2
    assert sorted(ids) == ["0", "1", "2"]
