"""Queue metadata in every Kubernetes mode: Kueue's queue-name label on the workload (the
TFJob, the JobSet, each plain Job), created suspended for Kueue to admit; the pods'
priorityClassName; a PodGroup for gang scheduling. The objects pass the real schemas (TFJob
CRD v1.9.0, JobSet CRD v0.12.0, Kubernetes v1.30 Job, strict), the label its documented
form (a Kubernetes label value naming a LocalQueue), and a run's cleanup deletes the
PodGroup with the job."""

from __future__ import annotations

import json
import re

import jsonschema
import pytest
import yaml
from support import run_launch
from test_jobset import jobset_validator
from test_kubernetes_backend import SCHEMAS, calls, rendered, strict, validator, write_spec

QUEUE = {"queue": "team-a", "priority_class": "high-priority"}
# a label value: at most 63 characters, alphanumerics with '-', '_', '.' inside
LABEL_VALUE = re.compile(r"^(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?$")


def kubernetes(tmp_path, mode: str, **extra) -> dict:
    spec = json.loads(write_spec(tmp_path, mode).read_text())
    return dict(spec["kubernetes"], **extra)


def pod_templates(obj: dict) -> list[dict]:
    if obj["kind"] == "TFJob":
        return [r["template"] for r in obj["spec"]["tfReplicaSpecs"].values()]
    if obj["kind"] == "JobSet":
        return [r["template"]["spec"]["template"] for r in obj["spec"]["replicatedJobs"]]
    return [obj["spec"]["template"]]


# the PodGroup CRDs of the gang schedulers (schemas/README.md), by apiVersion
POD_GROUP_CRDS = {
    "scheduling.volcano.sh/v1beta1": "podgroup-volcano-v1beta1-crd-v1.15.1.json",
    "scheduling.x-k8s.io/v1alpha1": "podgroup-coscheduling-v1alpha1-crd-v0.34.7.json",
}


def pod_group_validator(api: str) -> jsonschema.Validator:
    return jsonschema.Draft202012Validator(
        strict(json.loads((SCHEMAS / POD_GROUP_CRDS[api]).read_text())))


def check_schema(obj: dict) -> None:
    check = jobset_validator() if obj["kind"] == "JobSet" else \
        pod_group_validator(obj["apiVersion"]) if obj["kind"] == "PodGroup" else \
        validator(obj["kind"])
    errors = [e.message for e in check.iter_errors(obj)]
    assert not errors, f"{obj['kind']}: {errors[:3]}"


@pytest.mark.parametrize("mode, workloads", [("tfjob", ["TFJob"]), ("jobset", ["JobSet"]),
                                             ("plain", ["Job"] * 4)])
def test_queue_label_suspend_and_priority_in_every_mode_pass_the_schemas(tmp_path, mode,
                                                                        workloads):
    _, objects = rendered(tmp_path, mode, kubernetes=kubernetes(tmp_path, mode, **QUEUE))
    queued = [o for o in objects if o["kind"] != "Service"]
    assert [o["kind"] for o in queued] == workloads
    for obj in objects:
        check_schema(obj)
    for obj in queued:
        label = obj["metadata"]["labels"]["kueue.x-k8s.io/queue-name"]
        assert label == "team-a" and LABEL_VALUE.match(label) and len(label) <= 63
        suspend = obj["spec"]["runPolicy"]["suspend"] if mode == "tfjob" else \
            obj["spec"]["suspend"]
        assert suspend is True                   # Kueue starts it once admitted
        assert {t["spec"]["priorityClassName"] for t in pod_templates(obj)} == \
            {"high-priority"}
    services = [o for o in objects if o["kind"] == "Service"]
    assert all("kueue.x-k8s.io/queue-name" not in s["metadata"]["labels"] for s in services)
    if mode == "tfjob":
        assert queued[0]["spec"]["runPolicy"]["schedulingPolicy"] == {
            "priorityClass": "high-priority"}


def test_without_queue_options_nothing_changes(tmp_path):
    _, (jobset,) = rendered(tmp_path, "jobset")
    assert "suspend" not in jobset["spec"]
    assert "kueue.x-k8s.io/queue-name" not in jobset["metadata"]["labels"]
    assert all("priorityClassName" not in t["spec"] for t in pod_templates(jobset))


@pytest.mark.parametrize("group, api, scheduler, where", [
    ("volcano", "scheduling.volcano.sh/v1beta1", "volcano",
     ("annotations", "scheduling.k8s.io/group-name")),
    ("coscheduling", "scheduling.x-k8s.io/v1alpha1", "scheduler-plugins-scheduler",
     ("labels", "scheduling.x-k8s.io/pod-group")),
])
def test_a_pod_group_holds_every_task_and_every_pod_names_it(tmp_path, group, api, scheduler,
                                                            where):
    options = kubernetes(tmp_path, "jobset", pod_group=group, **QUEUE)
    _, objects = rendered(tmp_path, "jobset", kubernetes=options)
    assert [o["kind"] for o in objects] == ["PodGroup", "JobSet"]
    pod_group, jobset = objects
    check_schema(jobset)
    check_schema(pod_group)             # the scheduler's own PodGroup CRD, strict
    assert pod_group["apiVersion"] == api
    assert pod_group["metadata"]["name"] == jobset["metadata"]["name"]
    assert pod_group["spec"]["minMember"] == 6      # every task: 1+2+2+1
    # Volcano's PodGroup takes the priority class; coscheduling's has no such field
    assert pod_group["spec"].get("priorityClassName") == \
        ("high-priority" if group == "volcano" else None)
    for template in pod_templates(jobset):
        assert template["spec"]["schedulerName"] == scheduler
        assert template["metadata"][where[0]][where[1]] == pod_group["metadata"]["name"]


def test_a_tfjobs_gang_goes_through_the_operators_scheduling_policy(tmp_path):
    options = kubernetes(tmp_path, "tfjob", pod_group="volcano")
    _, objects = rendered(tmp_path, "tfjob", kubernetes=options)
    assert [o["kind"] for o in objects] == ["TFJob"]       # the operator makes the PodGroup
    check_schema(objects[0])
    assert objects[0]["spec"]["runPolicy"]["schedulingPolicy"] == {"minAvailable": 6}


@pytest.mark.parametrize("extra, message", [
    ({"queue": "Team A"}, "kubernetes.queue: 'Team A' is not a valid Kubernetes name"),
    ({"pod_group": "yunikorn"}, "kubernetes.pod_group: must be one of"),
    ({"priority_class": ""}, "kubernetes.priority_class"),
])
def test_bad_queue_options_are_one_line(tmp_path, extra, message):
    spec = write_spec(tmp_path, "jobset", kubernetes=kubernetes(tmp_path, "jobset", **extra))
    done = run_launch(str(spec), "--dry-run")
    assert done.returncode == 2
    assert len(done.stderr.strip().splitlines()) == 1 and message in done.stderr


def test_a_detached_runs_pod_group_is_applied_and_deleted_with_it(tmp_path, fake_kubectl):
    env, state, use = fake_kubectl
    use("tfjob_success.json", controller={"status": {"conditions": []}})
    env = dict(env, TFCLUSTER_RUNS=str(tmp_path / "runs"))
    options = kubernetes(tmp_path, "jobset", pod_group="volcano", queue="team-a")
    spec = write_spec(tmp_path, "jobset", name="k8s-q", evaluator=None,
                      cluster={"chief": 1, "worker": 1, "ps": 1}, kubernetes=options)
    done = run_launch(str(spec), "--detach", env=env, timeout=60)
    assert done.returncode == 0, done.stderr
    run_id = done.stdout.split()[1]
    applied = [d for d in yaml.safe_load_all((state / "applied.yaml").read_text()) if d]
    assert [d["kind"] for d in applied] == ["PodGroup", "JobSet"]
    assert applied[1]["spec"]["suspend"] is True
    done = run_launch("cancel", run_id, env=env)
    assert done.returncode == 0, done.stderr
    made = calls(state)
    assert ["delete", "jobset", "k8s-q", "-n", "ml", "--ignore-not-found", "--wait=true",
            "--timeout=120s"] in made
    assert ["delete", "podgroups.scheduling.volcano.sh", "k8s-q", "-n", "ml",
            "--ignore-not-found"] in made
