"""Kubernetes mode "jobset": the rendered JobSet against the CRD schema of JobSet v0.12.0,
its policies, every pod's TF_CONFIG (TensorFlow's own parsers read them in
test_kubernetes_backend.py, with the other modes' configs), and a detached run
(apply, then return; status and cancel through kubectl) against the recording kubectl."""

from __future__ import annotations

import copy
import json
from pathlib import Path

import jsonschema
import pytest
import yaml
from support import run_launch
from test_kubernetes_backend import (
    SCHEMAS,
    calls,
    pods,
    strict,
    validator,
    write_spec,
)

JOBSET_CRD = json.loads((SCHEMAS / "jobset-v1alpha2-crd-v0.12.0.json").read_text())


def jobset_validator() -> jsonschema.Validator:
    return jsonschema.Draft202012Validator(strict(JOBSET_CRD))


def render(tmp_path: Path, **overrides) -> dict:
    done = run_launch(str(write_spec(tmp_path, "jobset", **overrides)), "--dry-run", "--json")
    assert done.returncode == 0, done.stderr
    (jobset,) = [d for d in yaml.safe_load_all(json.loads(done.stdout)["rendered"]) if d]
    return jobset


def replicated(jobset: dict) -> dict[str, dict]:
    return {r["name"]: r for r in jobset["spec"]["replicatedJobs"]}


def test_jobset_passes_the_crd_schema_and_a_typo_does_not(tmp_path):
    jobset = render(tmp_path, restart={"ps": "on-failure", "worker": "on-failure"})
    assert jobset["apiVersion"] == "jobset.x-k8s.io/v1alpha2" and jobset["kind"] == "JobSet"
    errors = [e.message for e in jobset_validator().iter_errors(jobset)]
    assert not errors, errors[:3]
    # every child Job is also a valid batch/v1 Job (Kubernetes v1.30, strict)
    for rjob in jobset["spec"]["replicatedJobs"]:
        job = {"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": "x"},
               "spec": rjob["template"]["spec"]}
        assert validator("Job").is_valid(job), rjob["name"]
    bad = copy.deepcopy(jobset)
    bad["spec"]["replicatedJobs"][0]["template"]["spec"]["template"]["spec"][
        "containers"][0]["imagePullPolcy"] = "x"
    assert not jobset_validator().is_valid(bad)
    bad = copy.deepcopy(jobset)
    bad["spec"]["failurePolicy"]["rules"][0]["action"] = "RestartTheWorld"
    assert not jobset_validator().is_valid(bad)


def test_one_replicated_job_per_role_success_on_the_chief_ps_deleted_after(tmp_path):
    jobset = render(tmp_path)
    spec = jobset["spec"]
    jobs = replicated(jobset)
    assert list(jobs) == ["chief", "worker", "ps", "evaluator"]
    assert {n: (r["replicas"], r["template"]["spec"]["completions"]) for n, r in jobs.items()} \
        == {"chief": (1, 1), "worker": (1, 2), "ps": (1, 2), "evaluator": (1, 1)}
    assert all(r["template"]["spec"]["completionMode"] == "Indexed" for r in jobs.values())
    assert spec["network"]["enableDNSHostnames"] is True
    # done when the chief and the evaluator are; the controller then deletes the Jobs
    # still active (the ps, which never exit on their own)
    assert spec["successPolicy"] == {"operator": "All",
                                     "targetReplicatedJobs": ["chief", "evaluator"]}
    # restart "never" everywhere: any failure fails the JobSet, nothing is restarted
    assert spec["failurePolicy"]["maxRestarts"] == 0
    assert [r["action"] for r in spec["failurePolicy"]["rules"]] == ["FailJobSet"]
    assert all(r["template"]["spec"]["backoffLimit"] == 0 for r in jobs.values())
    ps = jobs["ps"]["template"]["spec"]["template"]["spec"]["containers"][0]
    assert ps["resources"]["limits"]["memory"] == "8Gi"


def test_without_a_chief_success_is_the_workers(tmp_path):
    jobset = render(tmp_path, cluster={"worker": 2, "ps": 1}, evaluator=None)
    assert jobset["spec"]["successPolicy"]["targetReplicatedJobs"] == ["worker"]


def test_failure_policy_carries_the_restart_rules(tmp_path):
    jobset = render(tmp_path, restart={"ps": {"policy": "on-failure", "max_restarts": 2},
                                       "worker": {"policy": "on-failure", "max_restarts": 3}})
    policy = jobset["spec"]["failurePolicy"]
    # a lost ps restarts the whole cluster (the JobSet is recreated), twice at most
    assert policy["maxRestarts"] == 2 and policy["restartStrategy"] == "Recreate"
    assert policy["rules"][0] == {"name": "lostPsRestartsTheCluster",
                                  "action": "RestartJobSet", "targetReplicatedJobs": ["ps"]}
    assert policy["rules"][-1]["action"] == "FailJobSet"
    jobs = replicated(jobset)
    # a failed worker is started again alone, three times at most (per index)
    assert jobs["worker"]["template"]["spec"]["backoffLimitPerIndex"] == 3
    assert "backoffLimit" not in jobs["worker"]["template"]["spec"]
    assert jobs["ps"]["template"]["spec"]["backoffLimit"] == 0
    assert jobs["chief"]["template"]["spec"]["backoffLimit"] == 0


@pytest.mark.parametrize("restart, message", [
    ({"worker": "always"}, 'restart.worker: policy "always" cannot be given to JobSet'),
])
def test_restart_rules_jobset_cannot_express_exit_2(tmp_path, restart, message):
    done = run_launch(str(write_spec(tmp_path, "jobset", restart=restart)), "--dry-run")
    assert done.returncode == 2 and message in done.stderr


def test_every_jobset_pod_gets_its_own_tf_config(tmp_path):
    """Each pod's TF_CONFIG names it at its stable host name; TensorFlow's own parsers read
    these configs in tests/kubernetes/test_kubernetes_backend.py (one process per version
    for every mode's pods)."""
    made = pods("jobset", [render(tmp_path)])
    assert sorted((p["role"], p["index"]) for p in made) == [
        ("chief", 0), ("evaluator", 0), ("ps", 0), ("ps", 1), ("worker", 0), ("worker", 1)]
    assert {(p["role"], p["index"]): p["shard"] for p in made} == {
        ("chief", 0): "0", ("worker", 0): "1", ("worker", 1): "2", ("ps", 0): None,
        ("ps", 1): None, ("evaluator", 0): None}
    for pod in made:
        cfg = json.loads(pod["env"]["TF_CONFIG"])
        assert cfg["task"] == {"type": pod["role"], "index": pod["index"]}
        if pod["role"] in cfg["cluster"]:     # the pod's own stable JobSet host name
            assert cfg["cluster"][pod["role"]][pod["index"]] == f"{pod['dns']}:2222"
        assert pod["env"]["TFCLUSTER_RESTART_COUNT"] == "0"


def test_detached_jobset_is_applied_then_followed_and_cancelled(tmp_path, fake_kubectl):
    env, state, use = fake_kubectl
    use("tfjob_success.json", controller={"status": {"conditions": []}})
    env = dict(env, TFCLUSTER_RUNS=str(tmp_path / "runs"))
    spec = write_spec(tmp_path, "jobset", name="k8s-js", evaluator=None,
                      cluster={"chief": 1, "worker": 1, "ps": 1},
                      restart={"worker": "on-failure"})
    done = run_launch(str(spec), "--detach", env=env, timeout=60)
    assert done.returncode == 0, done.stderr
    assert "submitted as jobset k8s-js in namespace ml" in done.stdout
    run_id = done.stdout.split()[1]
    applied = [d for d in yaml.safe_load_all((state / "applied.yaml").read_text()) if d]
    assert [d["kind"] for d in applied] == ["JobSet"]
    assert jobset_validator().is_valid(applied[0])
    assert not any(c[:1] == ["delete"] for c in calls(state)), "the launch left it running"
    status = run_launch("status", run_id, env=env)
    assert status.returncode == 0 and "state running" in status.stdout, status.stdout
    done = run_launch("cancel", run_id, env=env)
    assert done.returncode == 0, done.stderr
    assert ["delete", "jobset", "k8s-js", "-n", "ml", "--ignore-not-found", "--wait=true",
            "--timeout=120s"] in calls(state)
    status = run_launch("status", run_id, env=env)
    assert status.returncode == 1 and "state cancelled" in status.stdout


def test_a_finished_detached_jobset_is_reported_by_its_controller(tmp_path, fake_kubectl):
    env, state, use = fake_kubectl
    use("tfjob_success.json", controller={"status": {"terminalState": "Completed",
        "conditions": [{"type": "Completed", "status": "True",
                        "message": "jobset completed successfully"}]}})
    env = dict(env, TFCLUSTER_RUNS=str(tmp_path / "runs"))
    spec = write_spec(tmp_path, "jobset", name="k8s-js", evaluator=None,
                      cluster={"chief": 1, "worker": 1, "ps": 1})
    run_id = run_launch(str(spec), "--detach", env=env, timeout=60).stdout.split()[1]
    status = run_launch("status", run_id, env=env)
    assert status.returncode == 0 and "state succeeded" in status.stdout, status.stdout
    assert "jobset k8s-js: Completed (jobset completed successfully)" in status.stdout


def test_attached_jobset_with_restart_rules_asks_for_detach(tmp_path, fake_kubectl):
    env, state, use = fake_kubectl
    use("tfjob_success.json")
    spec = write_spec(tmp_path, "jobset", name="k8s-js", evaluator=None,
                      cluster={"chief": 1, "worker": 1, "ps": 1},
                      model_dir=str(tmp_path / "model"), restart={"worker": "on-failure"})
    done = run_launch(str(spec), "--run-dir", str(tmp_path / "run"), env=env, timeout=60)
    assert done.returncode == 2
    assert "carried out by JobSet itself: run the job with --detach" in done.stderr
    assert not (state / "applied.yaml").exists()


def big_jobset(tmp_path: Path, workers: int, ps: int) -> tuple[dict, int]:
    """The JobSet of ``workers`` workers and ``ps`` ps as launch applies it, and its size."""
    from launcher import api
    from launcher.backends.kubernetes import object_bytes

    spec, backend = api.prepare(str(write_spec(
        tmp_path, "jobset", cluster={"chief": 1, "worker": workers, "ps": ps})))
    (jobset,) = backend.objects(api.make_plan(spec, backend, None), redact=False)
    return jobset, object_bytes(jobset)


def test_a_jobset_of_1000_workers_and_50_ps_fits_and_each_pod_gets_its_tf_config(tmp_path):
    from launcher.backends.kubernetes import LAST_APPLIED_BYTES, MAX_OBJECT_BYTES

    jobset, size = big_jobset(tmp_path, 1000, 50)
    assert LAST_APPLIED_BYTES < size < MAX_OBJECT_BYTES    # applied server-side
    errors = [e.message for e in jobset_validator().iter_errors(jobset)]
    assert not errors, errors[:3]
    made = pods("jobset", [jobset])
    assert len(made) == 1 + 1000 + 50 + 1
    for pod in made:
        cfg = json.loads(pod["env"]["TF_CONFIG"])
        assert cfg["task"] == {"type": pod["role"], "index": pod["index"]}
        assert (len(cfg["cluster"]["worker"]), len(cfg["cluster"]["ps"])) == (1000, 50)
        if pod["role"] != "evaluator":
            assert cfg["cluster"][pod["role"]][pod["index"]] == f"{pod['dns']}:2222"


def test_a_jobset_above_the_api_servers_object_limit_is_one_clear_error(tmp_path,
                                                                        monkeypatch):
    from launcher.backends import kubernetes_objects
    from launcher.errors import PreflightError

    _, size = big_jobset(tmp_path, 200, 10)
    monkeypatch.setattr(kubernetes_objects, "MAX_OBJECT_BYTES", size - 1)
    with pytest.raises(PreflightError, match=r"^the JobSet ctr-train is 0\.\d MiB, above the "
                       r"0\.\d MiB the API server stores .*212 tasks are too many"):
        big_jobset(tmp_path, 200, 10)
