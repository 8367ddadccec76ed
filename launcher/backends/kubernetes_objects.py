"""The Kubernetes objects of a job, as plain data (``JobObjects``, from the accepted job:
its name, roles and restart rules): a TFJob, a JobSet, or per role a headless Service and
an indexed Job, each pod template with the TF_CONFIG its pods get. The attached backend
applies them, the submitter hands them over; ``--dry-run`` prints them as YAML."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

from launcher.backends.kubernetes_options import (
    CONTAINER,
    INDEX_ENV,
    INDEX_LABELS,
    JOBSET_API,
    JOBSET_RESTARTS,
    KINDS,
    LABEL,
    MAX_OBJECT_BYTES,
    POD_GROUPS,
    PORT_NAME,
    PROCESS_INDEX,
    QUEUE_LABEL,
    REPLICA_TYPES,
    KubernetesOptions,
    k8s_name,
    object_bytes,
    quantity,
)
from launcher.errors import PreflightError
from launcher.plan import JobPlan, grace_period
from launcher.redact import redact_env
from orchestrator.policies import RestartPolicy


@dataclass(frozen=True)
class JobObjects:
    """The objects of a job named ``job`` (a DNS label), with ``replicas`` tasks per role
    (the evaluator included) and the spec's ``restart`` rules (JobSet's to carry)."""

    options: KubernetesOptions = field(default_factory=KubernetesOptions)
    job: str = "job"
    replicas: dict[str, int] = field(default_factory=dict)
    restart: dict[str, RestartPolicy] = field(default_factory=dict)

    def handle(self, run_id: str) -> dict[str, Any]:
        """What names the run's objects (state.json's handle: ``launch status``, ``cancel``)."""
        o = self.options
        also = {"also": [POD_GROUPS[o.pod_group][1]]} if o.pod_group and o.mode != "tfjob" \
            else {}
        return {"kubernetes": {"kind": KINDS[o.mode], "name": self.job, "namespace": o.namespace,
                               **also, "run": self.labels(run_id=run_id)[f"{LABEL}/run"],
                               "kubectl": o.kubectl, "context": o.context}}

    def kinds(self) -> str:
        """What the job's objects are, as ``kubectl delete`` names them."""
        kinds = KINDS[self.options.mode]
        if self.options.pod_group and self.options.mode != "tfjob":
            kinds += "," + POD_GROUPS[self.options.pod_group][1]
        return kinds

    def pod_host(self, role: str, index: int) -> str:
        """The DNS name of a task's pod (the operator's naming in tfjob mode)."""
        ns = self.options.namespace
        if self.options.mode == "tfjob":
            return f"{self.job}-{role}-{index}.{ns}.svc"
        if self.options.mode == "jobset":   # JOBSET-RJOB-JOBINDEX-PODINDEX.SUBDOMAIN
            return f"{self.job}-{role}-0-{index}.{self.job}.{ns}.svc"
        return f"{self.job}-{role}-{index}.{self.job}-{role}.{ns}.svc"

    # ------------------------------------------------------------------ rendering
    def objects(self, plan: JobPlan, redact: bool = True) -> list[dict]:
        """The Kubernetes objects of the job, as plain data; PreflightError when one is
        larger than the API server takes (``MAX_OBJECT_BYTES``)."""
        if self.options.mode == "tfjob":
            out = [self._tfjob(plan, redact)]
        elif self.options.mode == "jobset":
            out = [self._jobset(plan, redact)]
        else:
            out = []
            for role in self.replicas:
                out.append(self._service(role))
                out.append(self._indexed_job(plan, role, redact))
        out = [self._queued(obj) for obj in out]
        if self.options.pod_group and self.options.mode != "tfjob":
            out.insert(0, self._pod_group(plan))
        for obj in out:
            size = object_bytes(obj)
            if size > MAX_OBJECT_BYTES:
                raise PreflightError(
                    f"the {obj['kind']} {obj['metadata']['name']} is {size / 2**20:.1f} MiB, "
                    f"above the {MAX_OBJECT_BYTES / 2**20:.1f} MiB the API server stores (etcd's "
                    f"request limit); {len(plan.tasks)} tasks are too many for one object: "
                    "split the job, or use kubernetes.mode \"plain\" (one Job per role)")
        return out

    def labels(self, role: str | None = None, run_id: str | None = None) -> dict[str, str]:
        labels = {f"{LABEL}/job": self.job}
        if role:
            labels[f"{LABEL}/role"] = role
        if run_id:
            labels[f"{LABEL}/run"] = k8s_name(run_id)[:63]
        return labels

    def _meta(self, name: str, role: str | None = None, run_id: str | None = None) -> dict:
        return {"name": name, "namespace": self.options.namespace,
                "labels": self.labels(role, run_id)}

    def _pod_spec(self, plan: JobPlan, role: str, redact: bool) -> dict:
        spec: dict[str, Any] = {"containers": [container(self.options, plan, role, redact)]}
        o = self.options
        if o.service_account:
            spec["serviceAccountName"] = o.service_account
        if o.node_selector:
            spec["nodeSelector"] = dict(o.node_selector)
        if o.image_pull_secrets:
            spec["imagePullSecrets"] = [{"name": s} for s in o.image_pull_secrets]
        if o.priority_class:
            spec["priorityClassName"] = o.priority_class
        if o.pod_group:
            spec["schedulerName"] = POD_GROUPS[o.pod_group][2]
        grace = grace_period(plan.timeouts)
        if grace is not None:
            spec["terminationGracePeriodSeconds"] = grace
        return spec

    def _tfjob(self, plan: JobPlan, redact: bool) -> dict:
        replicas = {}
        for role, count in self.replicas.items():
            replicas[REPLICA_TYPES[role]] = {
                "replicas": count,
                "restartPolicy": "Never",
                "template": {"metadata": self._template_meta(role, plan.run_id),
                             "spec": self._pod_spec(plan, role, redact)},
            }
        return {
            "apiVersion": "kubeflow.org/v1",
            "kind": "TFJob",
            "metadata": self._meta(self.job, run_id=plan.run_id),
            "spec": {
                # the job succeeds when the chief (else worker 0) does; then every pod still
                # running (the ps, which never exit on their own) is deleted
                "successPolicy": "",
                "runPolicy": self._run_policy(plan),
                "tfReplicaSpecs": replicas,
            },
        }

    def _run_policy(self, plan: JobPlan) -> dict:
        """A TFJob's runPolicy; with a pod_group or priority_class, its schedulingPolicy
        (the training operator makes the PodGroup itself when run with gang scheduling)."""
        o = self.options
        policy: dict[str, Any] = {"cleanPodPolicy": "Running", "backoffLimit": 0,
                                  "ttlSecondsAfterFinished": o.ttl_seconds_after_finished}
        scheduling: dict[str, Any] = {}
        if o.pod_group:
            scheduling["minAvailable"] = len(plan.tasks)
        if o.priority_class:
            scheduling["priorityClass"] = o.priority_class
        if scheduling:
            policy["schedulingPolicy"] = scheduling
        return policy

    def _jobset(self, plan: JobPlan, redact: bool) -> dict:
        roles = self.replicas
        replicated = []
        for role, count in roles.items():
            pod = self._pod_spec(plan, role, redact)
            pod["restartPolicy"] = "Never"
            policy = self.restart.get(role)
            per_index = policy.max_restarts if policy and policy.policy != "never" and \
                role != "ps" else 0
            job_spec: dict[str, Any] = {
                "completionMode": "Indexed", "completions": count, "parallelism": count,
                "template": {"metadata": self._template_meta(role, plan.run_id),
                             "spec": pod}}
            if per_index:   # a failed task alone is started again, up to max_restarts
                job_spec["backoffLimitPerIndex"] = per_index
            else:
                job_spec["backoffLimit"] = 0
            replicated.append({"name": role, "replicas": 1, "template": {
                "metadata": {"labels": self.labels(role, plan.run_id)}, "spec": job_spec}})
        primary = "chief" if "chief" in roles else "master" if "master" in roles else "worker"
        targets = [primary] + (["evaluator"] if "evaluator" in roles else [])
        return {
            "apiVersion": JOBSET_API,
            "kind": "JobSet",
            "metadata": self._meta(self.job, run_id=plan.run_id),
            "spec": {
                "network": {"enableDNSHostnames": True, "publishNotReadyAddresses": True},
                # done when the chief (else the workers) and the evaluator completed; the
                # controller then deletes the Jobs still active: the ps
                "successPolicy": {"operator": "All", "targetReplicatedJobs": targets},
                "failurePolicy": self._failure_policy(roles),
                "ttlSecondsAfterFinished": self.options.ttl_seconds_after_finished,
                "replicatedJobs": replicated,
            },
        }

    def _failure_policy(self, roles: dict[str, int]) -> dict:
        """tfcluster's restart rules as JobSet's: a lost ps restarts the whole cluster (the
        JobSet is recreated, up to the ps policy's max_restarts); any other Job that failed
        (its tasks' own restarts used up) fails the JobSet."""
        ps = self.restart.get("ps")
        ps_restarts = ps.max_restarts if ps and ps.policy != "never" and "ps" in roles else 0
        rules = []
        if ps_restarts:
            rules.append({"name": "lostPsRestartsTheCluster", "action": "RestartJobSet",
                          "targetReplicatedJobs": ["ps"]})
        rules.append({"name": "anyOtherFailureFailsTheJob", "action": "FailJobSet"})
        return {"maxRestarts": ps_restarts, "restartStrategy": "Recreate", "rules": rules}

    def _queued(self, obj: dict) -> dict:
        """With kubernetes.queue, a workload as Kueue expects it: its LocalQueue's label,
        and created suspended (Kueue unsuspends it once admitted)."""
        queue = self.options.queue
        if queue is None or obj["kind"] == "Service":
            return obj
        obj["metadata"]["labels"][QUEUE_LABEL] = queue
        if obj["kind"] == "TFJob":
            obj["spec"]["runPolicy"]["suspend"] = True
        else:
            obj["spec"] = {"suspend": True, **obj["spec"]}
        return obj

    def _pod_group(self, plan: JobPlan) -> dict:
        """One PodGroup of every task: the gang scheduler starts all of them or none.
        Volcano's PodGroup also takes the priority class; coscheduling's has no such field
        (its pods carry theirs)."""
        api, _, _, _ = POD_GROUPS[str(self.options.pod_group)]
        spec: dict[str, Any] = {"minMember": len(plan.tasks)}
        if self.options.priority_class and self.options.pod_group == "volcano":
            spec["priorityClassName"] = self.options.priority_class
        return {"apiVersion": api, "kind": "PodGroup",
                "metadata": self._meta(self.job, run_id=plan.run_id), "spec": spec}

    def _template_meta(self, role: str, run_id: str) -> dict:
        """A pod template's metadata: tfcluster's labels, and its PodGroup's name."""
        meta: dict[str, Any] = {"labels": self.labels(role, run_id)}
        if self.options.pod_group and self.options.mode != "tfjob":
            where, key = POD_GROUPS[self.options.pod_group][3]
            if where == "label":
                meta["labels"][key] = self.job
            else:
                meta["annotations"] = {key: self.job}
        return meta

    def _service(self, role: str) -> dict:
        """Headless: gives each pod of the role's Job a DNS name, before it is ready too."""
        return {
            "apiVersion": "v1",
            "kind": "Service",
            "metadata": self._meta(f"{self.job}-{role}", role),
            "spec": {"clusterIP": "None", "publishNotReadyAddresses": True,
                     "selector": self.labels(role),
                     "ports": [{"name": PORT_NAME, "port": self.options.port,
                                "targetPort": self.options.port}]},
        }

    def _indexed_job(self, plan: JobPlan, role: str, redact: bool) -> dict:
        count = self.replicas[role]
        pod = self._pod_spec(plan, role, redact)
        pod["subdomain"] = f"{self.job}-{role}"
        pod["restartPolicy"] = "Never"
        return {
            "apiVersion": "batch/v1",
            "kind": "Job",
            "metadata": self._meta(f"{self.job}-{role}", role, plan.run_id),
            "spec": {"completionMode": "Indexed", "completions": count, "parallelism": count,
                     "backoffLimit": 0,
                     "ttlSecondsAfterFinished": self.options.ttl_seconds_after_finished,
                     "template": {"metadata": self._template_meta(role, plan.run_id),
                                  "spec": pod}},
        }


def pod_env(mode: str, plan: JobPlan, role: str, redact: bool) -> tuple[list[dict], bool]:
    """The pod template's env for a role: task 0's, with the index taken from the pod.
    Also whether the shard index needs the shell (index + 1 for workers after a chief)."""
    task = plan.task(role, 0)
    env = redact_env(task.env) if redact else dict(task.env)
    index_ref = f"metadata.labels['{INDEX_LABELS['tfjob']}']" if mode == "tfjob" else \
        "metadata.annotations['batch.kubernetes.io/job-completion-index']"
    out: list[dict] = [{"name": INDEX_ENV, "valueFrom": {"fieldRef": {
        "fieldPath": index_ref}}}]
    shift = False
    # the spec's own values go last, as written: the kubelet expands their $(VAR) from
    # the variables before them, as the launcher does for other backends
    own = {k: v for k, v in task.raw_env.items() if k in env}
    if redact:
        own = {k: env[k] if env[k] == "***" else v for k, v in own.items()}
    ordered = [(k, v) for k, v in env.items() if k not in own] + list(own.items())
    for key, value in ordered:
        if key in own:
            out.append({"name": key, "value": value})
            continue
        if key in PROCESS_INDEX and value != "0":
            shift = True                        # index + 1: computed by the command
            continue
        entry = pod_value(key, value.replace("$(", "$$("), role, mode)
        if entry is not None:                   # the kubelet expands $(VAR): keep literal
            out.append(entry)
    return out, shift

def pod_value(key: str, value: str, role: str, mode: str) -> dict | None:
    """One launcher variable in the pod template: the task's index taken from the pod
    where the value names it; None where the engine sets it (TFJob's TF_CONFIG)."""
    if key == "TFCLUSTER_TASK_INDEX":
        value = f"$({INDEX_ENV})"
    elif key == "TF_CONFIG":
        if mode == "tfjob":
            return None                         # the operator sets it
        cluster = json.dumps(json.loads(value)["cluster"], separators=(",", ":"))
        value = f'{{"cluster":{cluster},"task":{{"type":"{role}","index":$({INDEX_ENV})}}}}'
    elif key == "TFCLUSTER_RESTART_COUNT" and mode == "jobset":
        return {"name": key, "valueFrom": {"fieldRef": {  # the JobSet's restarts
            "fieldPath": f"metadata.labels['{JOBSET_RESTARTS}']"}}}
    elif key == "TFCLUSTER_TASK":
        value = f"{role}:$({INDEX_ENV})"
    elif key in PROCESS_INDEX and role == "worker":
        value = f"$({INDEX_ENV})"
    return {"name": key, "value": value}

def container(o: KubernetesOptions, plan: JobPlan, role: str, redact: bool) -> dict:
    task = plan.task(role, 0)
    env, shift = pod_env(o.mode, plan, role, redact)
    command = list(task.raw_command or task.command)    # the kubelet expands $(VAR)
    if shift:
        keras = "export KERAS_DISTRIBUTION_PROCESS_ID=$TFCLUSTER_SHARD_INDEX; " \
            if "KERAS_DISTRIBUTION_PROCESS_ID" in task.env else ""
        command = ["/bin/sh", "-c", f"export TFCLUSTER_SHARD_INDEX=$(({INDEX_ENV} + 1)); "
                   f'{keras}exec "$@"', "sh", *command]
    c: dict[str, Any] = {"name": CONTAINER, "image": o.image,
                         "imagePullPolicy": o.image_pull_policy,
                         "command": command, "env": env,
                         "ports": [{"name": PORT_NAME, "containerPort": o.port}]}
    if task.cwd:
        c["workingDir"] = task.cwd
    if o.env_from_secrets:
        c["envFrom"] = [{"secretRef": {"name": s}} for s in o.env_from_secrets]
    res = task.resources
    requests: dict[str, str] = {}
    limits: dict[str, str] = {}
    if res.cpus:
        requests["cpu"] = str(res.cpus)
    if res.memory is not None:
        requests["memory"] = limits["memory"] = quantity(res.memory)
    if res.gpus:
        limits["nvidia.com/gpu"] = str(res.gpus)
    if requests or limits:
        c["resources"] = {k: v for k, v in (("requests", requests), ("limits", limits)) if v}
    return c
