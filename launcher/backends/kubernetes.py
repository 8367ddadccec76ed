"""Kubernetes backend: render the job as Kubernetes objects, apply them with kubectl, follow
the pods.

Three renderings (``kubernetes.mode``):
- ``jobset``: one JobSet (jobset.x-k8s.io/v1alpha2, kubernetes-sigs/jobset, maintained):
  one replicated job per role, each an indexed Job whose pods get stable host names
  ``NAME-ROLE-0-I.NAME`` (``network.enableDNSHostnames``); TF_CONFIG names them. The
  success policy targets the chief (the workers without a chief) and the evaluator; when
  it is met the JobSet controller deletes the Jobs still active: the ps. The failure policy
  carries the spec's restart policies (a task restarted alone: its Job's
  ``backoffLimitPerIndex``; a lost ps: the whole JobSet recreated, ``maxRestarts``).
- ``tfjob``: one Kubeflow TFJob (kubeflow.org/v1). The training operator gives every pod
  its TF_CONFIG; ``runPolicy.cleanPodPolicy: Running`` deletes the ps (and any pod still
  running) once the job succeeded, which the chief's success decides (``successPolicy``).
  The operator (training-operator v1.9) is no longer developed.
- ``plain``: for clusters without the operator, per role a headless Service and an indexed
  Job whose pods are ``NAME-ROLE-I.NAME-ROLE.NAMESPACE.svc``; TF_CONFIG is in the pod
  template, the pod's index filled in by the kubelet from the completion index.

Every task's address is its pod's DNS name, so the plan (and ``--dry-run``) shows exactly the
TF_CONFIG each pod gets. ``launch`` applies the objects (``kubectl apply -f -``), follows the
pods (``kubectl get pods -o json``, ``kubectl logs -f``), stops tasks by deleting their pod
(the ps: its Job in plain mode) and deletes everything of the job at the end. No API server
runs where this was written: that path is tested against a fake kubectl (docs/kubernetes.md).
"""

from __future__ import annotations

import dataclasses
import json
import os
import re
import signal
import subprocess
import threading
import time
from dataclasses import dataclass
from typing import Any

from launcher.backends.base import Backend, ProbeResult, TaskHandle
from launcher.backends.engine import EngineJob, Follower, Submits
from launcher.backends.options import option
from launcher.checks import Address
from launcher.errors import PreflightError, SpecError
from launcher.plan import IMAGE_SITE, JobPlan, NoticeRoute, Reservation, TaskPlan, grace_period
from launcher.redact import redact_env
from orchestrator.policies import RestartPolicy

MODES = ("tfjob", "plain", "jobset")
JOBSET_API = "jobset.x-k8s.io/v1alpha2"
JOBSET_RESTARTS = "jobset.sigs.k8s.io/restart-attempt"   # label on every pod of a JobSet
KINDS = {"tfjob": "tfjob", "jobset": "jobset", "plain": "job,service"}
CRDS = {"tfjob": ("tfjobs.kubeflow.org", "TFJob resource (Kubeflow training operator)"),
        "jobset": ("jobsets.jobset.x-k8s.io", "JobSet resource (kubernetes-sigs/jobset)")}
PULL_POLICIES = ("Always", "IfNotPresent", "Never")
CONTAINER = "tensorflow"          # the operator's default container name
PORT_NAME = "tfjob-port"          # the operator reads the port from this container port
REPLICA_TYPES = {"chief": "Chief", "master": "Master", "worker": "Worker", "ps": "PS",
                 "evaluator": "Evaluator"}
LABEL = "tfcluster.io"
INDEX_LABELS = {"tfjob": "training.kubeflow.org/replica-index",
                "jobset": "batch.kubernetes.io/job-completion-index",
                "plain": "batch.kubernetes.io/job-completion-index"}
INDEX_ENV = "TFCLUSTER_INDEX"
# a worker's place among the trainers (and, for "keras": "jax", among JAX's processes):
# its index, or its index + 1 behind a chief
PROCESS_INDEX = ("TFCLUSTER_SHARD_INDEX", "KERAS_DISTRIBUTION_PROCESS_ID")
_DNS_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
POLL_EVERY = 1.0                  # seconds between `kubectl get pods` calls
# The API server stores an object in etcd, whose requests are limited to 1.5 MiB by default
# (--max-request-bytes): a larger object is refused. A JobSet's pod templates carry the
# whole cluster's addresses once per role (1,000 workers + 50 ps: about 0.5 MB).
MAX_OBJECT_BYTES = 1_572_864
# kubectl's client-side apply keeps a copy of the object in an annotation, and annotations
# are limited to 256 KiB: a larger object is applied server-side.
LAST_APPLIED_BYTES = 262_144


QUEUE_LABEL = "kueue.x-k8s.io/queue-name"
# pod_group -> (PodGroup apiVersion, the resource kubectl deletes, the scheduler's name, how
# a pod names its group: "label" or "annotation" and the key)
POD_GROUPS = {
    "volcano": ("scheduling.volcano.sh/v1beta1", "podgroups.scheduling.volcano.sh", "volcano",
                ("annotation", "scheduling.k8s.io/group-name")),
    "coscheduling": ("scheduling.x-k8s.io/v1alpha1", "podgroups.scheduling.x-k8s.io",
                     "scheduler-plugins-scheduler", ("label", "scheduling.x-k8s.io/pod-group")),
}


def _no_spaces(value: str, where: str) -> str:
    if any(c.isspace() for c in value):
        raise SpecError(where, f"{value!r} must not contain spaces")
    return value


def _dns_label(value: str, where: str) -> str:
    if not _DNS_LABEL.match(value) or len(value) > 63:
        raise SpecError(where, f"{value!r} is not a valid Kubernetes name (lower case "
                               "letters, digits, '-')")
    return value


def _object_names(values: list[str], where: str) -> list[str]:
    for i, value in enumerate(values):
        if not _DNS_LABEL.match(value):
            raise SpecError(f"{where}[{i}]", f"{value!r} is not a Kubernetes object name")
    return values


@dataclass(frozen=True)
class KubernetesOptions:
    """The spec's ``kubernetes`` section."""

    image: str = option("tfcluster:tf2.15", "str", check=_no_spaces, doc="every pod's image")
    namespace: str = option("default", "str", check=_dns_label)
    mode: str = option("tfjob", "choice", choices=MODES,
                       doc="jobset (JobSet, maintained: the one to pick), tfjob (Kubeflow's "
                           "TFJob, training-operator v1.9, unmaintained) or plain (indexed "
                           "Jobs and Services)")
    service_account: str | None = option(None, "str", check=_dns_label)
    image_pull_policy: str = option("IfNotPresent", "choice", choices=PULL_POLICIES)
    port: int = option(2222, "int", maximum=65535, doc="every task's port")
    context: str | None = option(None, "str", check=_no_spaces, doc="kubectl context")
    kubectl: str = option("kubectl", "str", check=_no_spaces, doc="the kubectl program")
    node_selector: dict[str, str] = option({}, "map")
    image_pull_secrets: list[str] = option([], "names", check=_object_names)
    env_from_secrets: list[str] = option([], "names", check=_object_names)
    ttl_seconds_after_finished: int = option(3600, "int", minimum=0)
    queue: str | None = option(None, "str", check=_dns_label,
                               doc="Kueue's LocalQueue: the kueue.x-k8s.io/queue-name label; "
                                   "the job is created suspended and Kueue starts it once "
                                   "admitted")
    priority_class: str | None = option(None, "str", check=_dns_label,
                                        doc="every pod's PriorityClass (priorityClassName)")
    pod_group: str | None = option(None, "choice", choices=(None, *POD_GROUPS),
                                   doc="gang scheduling: a PodGroup of every task for "
                                       "volcano or coscheduling (scheduler-plugins)")



def k8s_name(text: str) -> str:
    """A DNS-1123 label from the spec's name: lower case, '-' for anything else."""
    name = re.sub(r"[^a-z0-9-]+", "-", text.lower()).strip("-")
    return name or "job"


def quantity(memory: str) -> str:
    """The spec's memory ('4G', '512M', '2Gi') as a Kubernetes quantity ('K' is 'k' there)."""
    return memory[:-1] + "k" if memory.endswith("K") else memory


class KubernetesBackend(Backend, EngineJob, Follower):
    """Renders a TFJob (or plain Jobs and Services) and runs it through kubectl. Built in
    mode tfjob or jobset, it is a ``KubernetesControllerBackend``: ``--detach`` submits
    those, which end the job themselves; plain Jobs need the launcher to stop the ps, so a
    detached plain run keeps its launcher, as a daemon."""

    name = "kubernetes"
    OPTIONS = KubernetesOptions
    ports_picked_at_start = False      # every pod listens on kubernetes.port
    options: KubernetesOptions
    reachable = False   # pod addresses are cluster-internal: the engine's state alone
    # a pod hears only SIGTERM (its deletion), with no launcher beside it: the chief saves
    # on it, the ps serves on while the chief answers (docs/preemption.md)
    notice = NoticeRoute("URG,TERM", IMAGE_SITE, signal.SIGTERM)

    def __new__(cls, options: KubernetesOptions | None = None, **kwargs: Any) -> KubernetesBackend:
        if cls is KubernetesBackend and (options or KubernetesOptions()).mode != "plain":
            cls = KubernetesControllerBackend
        return super().__new__(cls)

    def __init__(self, options: KubernetesOptions | None = None, *, remap: bool = False,
                 inside_job: bool = False):
        super().__init__(options or KubernetesOptions(), remap=remap, inside_job=inside_job)
        self.job = "job"                           # the job's name as Kubernetes takes it
        self.replicas: dict[str, int] = {}         # role -> tasks, the evaluator included
        self.restart: dict[str, RestartPolicy] = {}   # the spec's own rules: JobSet's
        self.plan: JobPlan | None = None
        self.applied = False
        self._pods: list[dict] = []
        self._pods_at = 0.0
        self._lock = threading.Lock()
        self.handles: list[KubernetesHandle] = []

    # ------------------------------------------------------------------ reservation
    def accept(self, reservation: Reservation) -> None:
        """The job's names, replicas and the restart rules JobSet is to carry: every pod
        name fits in a DNS label, and a rule is one JobSet can express."""
        self.job = k8s_name(reservation.name)
        self.replicas = reservation.roles
        self._check_name_lengths(reservation.name)
        for role, policy in reservation.restart.items():
            if policy.policy == "never":
                continue
            if self.options.mode != "jobset":
                raise SpecError(f"restart.{role}", "the kubernetes backend restarts tasks "
                                                   "only in mode \"jobset\" (JobSet's "
                                                   "failure policy); the pods' controller "
                                                   "owns them")
            if policy.policy == "always" and role != "ps":
                raise SpecError(f"restart.{role}", "policy \"always\" cannot be given to "
                                                   "JobSet (a pod that exits 0 is complete): "
                                                   "use \"on-failure\"")
        self.restart = dict(reservation.restart)

    def _check_name_lengths(self, name: str) -> None:
        longest = max(self.replicas.values())
        worst = f"{self.job}-evaluator-{'0-' if self.options.mode == 'jobset' else ''}" \
                f"{longest - 1}"
        if len(worst) > 63:
            raise SpecError("name", f"{name!r} is too long for Kubernetes: pod names "
                                    f"like {worst!r} must be at most 63 characters")

    def roles(self) -> dict[str, int]:
        """Role -> number of tasks, the evaluator included."""
        return self.replicas

    def pod_host(self, role: str, index: int) -> str:
        """The DNS name of a task's pod (the operator's naming in tfjob mode)."""
        ns = self.options.namespace
        if self.options.mode == "tfjob":
            return f"{self.job}-{role}-{index}.{ns}.svc"
        if self.options.mode == "jobset":   # JOBSET-RJOB-JOBINDEX-PODINDEX.SUBDOMAIN
            return f"{self.job}-{role}-0-{index}.{self.job}.{ns}.svc"
        return f"{self.job}-{role}-{index}.{self.job}-{role}.{ns}.svc"

    def place(self, role: str, index: int, address: Address) -> Address:
        """Every task is its pod, at its DNS name and ``kubernetes.port``: the plan then
        carries the TF_CONFIG each pod gets."""
        return dataclasses.replace(address, host=self.pod_host(role, index),
                                   port=self.options.port)

    def allocate_port(self, host: str) -> int:
        return self.options.port

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
            for role in self.roles():
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

    def describe(self, plan: JobPlan) -> str:
        return render_yaml(self.objects(plan, redact=True))

    def _labels(self, role: str | None = None, run_id: str | None = None) -> dict[str, str]:
        labels = {f"{LABEL}/job": self.job}
        if role:
            labels[f"{LABEL}/role"] = role
        if run_id:
            labels[f"{LABEL}/run"] = k8s_name(run_id)[:63]
        return labels

    def _meta(self, name: str, role: str | None = None, run_id: str | None = None) -> dict:
        return {"name": name, "namespace": self.options.namespace,
                "labels": self._labels(role, run_id)}

    def _env(self, plan: JobPlan, role: str, redact: bool) -> tuple[list[dict], bool]:
        """The pod template's env for a role: task 0's, with the index taken from the pod.
        Also whether the shard index needs the shell (index + 1 for workers after a chief)."""
        task = plan.task(role, 0)
        mode = self.options.mode
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
            entry = self._pod_value(key, value.replace("$(", "$$("), role, mode)
            if entry is not None:                   # the kubelet expands $(VAR): keep literal
                out.append(entry)
        return out, shift

    @staticmethod
    def _pod_value(key: str, value: str, role: str, mode: str) -> dict | None:
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

    def _container(self, plan: JobPlan, role: str, redact: bool) -> dict:
        task = plan.task(role, 0)
        env, shift = self._env(plan, role, redact)
        command = list(task.raw_command or task.command)    # the kubelet expands $(VAR)
        if shift:
            keras = "export KERAS_DISTRIBUTION_PROCESS_ID=$TFCLUSTER_SHARD_INDEX; " \
                if "KERAS_DISTRIBUTION_PROCESS_ID" in task.env else ""
            command = ["/bin/sh", "-c", f"export TFCLUSTER_SHARD_INDEX=$(({INDEX_ENV} + 1)); "
                       f'{keras}exec "$@"', "sh", *command]
        c: dict[str, Any] = {"name": CONTAINER, "image": self.options.image,
                             "imagePullPolicy": self.options.image_pull_policy,
                             "command": command, "env": env,
                             "ports": [{"name": PORT_NAME, "containerPort": self.options.port}]}
        if task.cwd:
            c["workingDir"] = task.cwd
        if self.options.env_from_secrets:
            c["envFrom"] = [{"secretRef": {"name": s}} for s in self.options.env_from_secrets]
        res = task.resources
        requests: dict[str, str] = {}
        limits: dict[str, str] = {}
        if res.get("cpus"):
            requests["cpu"] = str(res["cpus"])
        if "memory" in res:
            requests["memory"] = limits["memory"] = quantity(res["memory"])
        if res.get("gpus"):
            limits["nvidia.com/gpu"] = str(res["gpus"])
        if requests or limits:
            c["resources"] = {k: v for k, v in (("requests", requests), ("limits", limits)) if v}
        return c

    def _pod_spec(self, plan: JobPlan, role: str, redact: bool) -> dict:
        spec: dict[str, Any] = {"containers": [self._container(plan, role, redact)]}
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
        for role, count in self.roles().items():
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
        roles = self.roles()
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
                "metadata": {"labels": self._labels(role, plan.run_id)}, "spec": job_spec}})
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
        meta: dict[str, Any] = {"labels": self._labels(role, run_id)}
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
                     "selector": self._labels(role),
                     "ports": [{"name": PORT_NAME, "port": self.options.port,
                                "targetPort": self.options.port}]},
        }

    def _indexed_job(self, plan: JobPlan, role: str, redact: bool) -> dict:
        count = self.roles()[role]
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

    # ------------------------------------------------------------------ kubectl
    def kubectl(self, *args: str, stdin: str | None = None,
                timeout: float = 60) -> subprocess.CompletedProcess:
        argv = [self.options.kubectl]
        if self.options.context:
            argv.append(f"--context={self.options.context}")
        try:
            return subprocess.run(argv + list(args), input=stdin, capture_output=True,
                                  text=True, timeout=timeout)
        except FileNotFoundError:
            return subprocess.CompletedProcess(argv, 127, "", f"{argv[0]}: not found")
        except subprocess.TimeoutExpired:
            return subprocess.CompletedProcess(argv, 124, "", "kubectl timed out")

    def preflight(self, plan: JobPlan) -> None:
        self.plan = plan
        done = self.kubectl("config", "current-context")
        if done.returncode != 0:
            raise PreflightError("no Kubernetes cluster configured for kubectl ("
                                 f"{(done.stderr or done.stdout).strip()}); print the objects "
                                 "with --dry-run and apply them yourself")
        if self.options.mode in CRDS:
            crd, what = CRDS[self.options.mode]
            done = self.kubectl("get", "crd", crd, "-o", "name")
            if done.returncode != 0:
                raise PreflightError(f"the cluster has no {what}; set kubernetes.mode to "
                                     "\"plain\" (or install it)")

    def probe(self, task: TaskPlan, argv: list[str], timeout: float) -> ProbeResult:
        return ProbeResult(125, "pods cannot be probed before they exist: set \"check_storage\""
                                ": false and give a model_dir every pod reaches (s3://, gs://, "
                                "a volume)")

    def apply(self) -> None:
        """``kubectl apply`` of the job's objects (once)."""
        if self.applied:
            return
        if self.plan is None:
            raise RuntimeError("Kubernetes backend: apply before preflight()")
        objects = self.objects(self.plan, redact=False)
        large = any(object_bytes(o) > LAST_APPLIED_BYTES for o in objects)
        done = self.kubectl("apply", *(["--server-side"] if large else []), "-f", "-",
                            stdin=render_yaml(objects))
        if done.returncode != 0:
            raise PreflightError(f"kubectl apply failed: {done.stderr.strip()}")
        self.applied = True

    @classmethod
    def describe_handle(cls, handle: dict[str, Any]) -> str:
        k8s = handle.get("kubernetes")
        return f"{k8s['kind']} {k8s['name']} in namespace {k8s['namespace']}" if k8s else ""

    @classmethod
    def engine_state(cls, handle: dict[str, Any], recorded: str) -> tuple[str, str] | None:
        return engine_state(handle["kubernetes"]) if handle.get("kubernetes") else None

    @classmethod
    def engine_tasks(cls, handle: dict[str, Any]) -> list[dict[str, Any]] | None:
        return engine_tasks(handle["kubernetes"]) if handle.get("kubernetes") else None

    @classmethod
    def cancel_run(cls, handle: dict[str, Any], queued: bool) -> None:
        if handle.get("kubernetes"):
            delete_run(handle["kubernetes"])

    def run_handle(self) -> dict[str, Any]:
        if self.plan is None:
            return {}
        o = self.options
        also = {"also": [POD_GROUPS[o.pod_group][1]]} if o.pod_group and o.mode != "tfjob" \
            else {}
        return {"kubernetes": {"kind": KINDS[o.mode], "name": self.job, "namespace": o.namespace,
                               **also,
                               "run": self._labels(run_id=self.plan.run_id)[f"{LABEL}/run"],
                               "kubectl": o.kubectl, "context": o.context}}

    def start(self, task: TaskPlan) -> TaskHandle:
        if self.options.mode == "jobset" and any(p.policy != "never"
                                                 for p in self.restart.values()):
            raise PreflightError("restart policies in kubernetes mode \"jobset\" are carried "
                                 "out by JobSet itself: run the job with --detach")
        self.apply()
        handle = KubernetesHandle(self, task)
        self.handles.append(handle)
        return handle

    def pods(self) -> list[dict]:
        """This run's pods, from one `kubectl get pods` every POLL_EVERY seconds at most."""
        with self._lock:
            if time.monotonic() - self._pods_at >= POLL_EVERY and self.plan is not None:
                run = self._labels(run_id=self.plan.run_id)[f"{LABEL}/run"]
                done = self.kubectl("get", "pods", "-n", self.options.namespace, "-l",
                                    f"{LABEL}/run={run}", "-o", "json")
                if done.returncode == 0:
                    self._pods = json.loads(done.stdout).get("items", [])
                self._pods_at = time.monotonic()
            return self._pods

    def stop_task(self, task: TaskPlan, pod: str | None, sig: int) -> None:
        force = ["--grace-period=0", "--force"] if sig == signal.SIGKILL else []
        ns = ["-n", self.options.namespace, "--ignore-not-found", "--wait=false"]
        if self.options.mode == "plain":      # a deleted pod would be replaced by its Job
            self.kubectl("delete", "job", f"{self.job}-{task.type}", *ns, *force)
        elif pod:
            self.kubectl("delete", "pod", pod, *ns, *force)

    def close(self) -> None:
        """Delete every object of the job (the logs are in the run directory already)."""
        for handle in self.handles:
            handle.close()
        if self.applied:
            self.kubectl("delete", self._kinds(), "-n", self.options.namespace, "-l",
                         f"{LABEL}/job={self.job}", "--ignore-not-found", "--wait=false")
            self.applied = False

    def _kinds(self) -> str:
        """What the job's objects are, as ``kubectl delete`` names them."""
        kinds = KINDS[self.options.mode]
        if self.options.pod_group and self.options.mode != "tfjob":
            kinds += "," + POD_GROUPS[self.options.pod_group][1]
        return kinds


class KubernetesControllerBackend(KubernetesBackend, Submits):
    """Mode tfjob or jobset: the controller (the training operator, JobSet) runs the job to
    its end, so ``--detach`` submits it and returns."""

    def submit(self, plan: JobPlan, run_dir: str, relaunch: list[str]) -> dict[str, Any]:
        """``--detach``: apply, then return; the controller owns the job from here."""
        self.preflight(plan)
        self.apply()
        self.applied = False            # this process leaves; the objects stay
        return {"kubernetes": self.run_handle()["kubernetes"]}

    def describe_detached(self, plan: JobPlan, run_dir: str, relaunch: list[str]) -> str:
        return self.describe(plan)


class KubernetesHandle(TaskHandle):
    """Follows one task's pod: its state through the backend's pod list, its log through
    ``kubectl logs -f`` into a pipe."""

    def __init__(self, backend: KubernetesBackend, task: TaskPlan):
        self.backend = backend
        self.task = task
        self.stopped_by: int | None = None
        self._logs: subprocess.Popen | None = None
        self._closed = threading.Event()
        read_end, self._write = os.pipe()
        self.output = os.fdopen(read_end, "rb")
        threading.Thread(target=self._follow_log, name=f"logs-{task.name}",
                         daemon=True).start()

    def pod(self) -> dict | None:
        """The newest pod of this task."""
        index_label = INDEX_LABELS[self.backend.options.mode]
        mine = [p for p in self.backend.pods()
                if p["metadata"].get("labels", {}).get(f"{LABEL}/role") == self.task.type
                and p["metadata"].get("labels", {}).get(index_label) == str(self.task.index)]
        return max(mine, key=lambda p: p["metadata"].get("creationTimestamp", ""), default=None)

    @staticmethod
    def exit_code(pod: dict) -> int | None:
        for status in pod.get("status", {}).get("containerStatuses", []):
            if status.get("name") == CONTAINER:
                done = status.get("state", {}).get("terminated")
                if done is not None:
                    return int(done.get("exitCode", 1))
        phase = pod.get("status", {}).get("phase")
        return {"Succeeded": 0, "Failed": 1}.get(phase)

    def poll(self) -> int | None:
        pod = self.pod()
        if pod is None or pod["metadata"].get("deletionTimestamp"):
            return -self.stopped_by if self.stopped_by and pod is None else None
        status = self.exit_code(pod)
        if status is not None and self.stopped_by and status:
            return -self.stopped_by
        return status

    def signal(self, sig: int) -> None:
        if sig not in (signal.SIGTERM, signal.SIGKILL, signal.SIGINT, signal.SIGHUP):
            return                                    # only deletion reaches a pod
        pod = self.pod()
        if pod is not None and self.exit_code(pod) is not None:
            return
        self.stopped_by = self.stopped_by or sig
        self.backend.stop_task(self.task, pod["metadata"]["name"] if pod else None, sig)

    def _follow_log(self) -> None:
        """Wait until the pod runs (or ended), then stream its log into the pipe."""
        try:
            while not self._closed.is_set():
                pod = self.pod()
                phase = (pod or {}).get("status", {}).get("phase")
                if pod is not None and phase in ("Running", "Succeeded", "Failed"):
                    self._logs = subprocess.Popen(
                        [self.backend.options.kubectl,
                         *([f"--context={self.backend.options.context}"]
                           if self.backend.options.context else []),
                         "logs", "-f", "-n", self.backend.options.namespace,
                         pod["metadata"]["name"], "-c", CONTAINER],
                        stdout=self._write, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
                    self._logs.wait()
                    return
                if self.poll() is not None:
                    return
                self._closed.wait(POLL_EVERY)
        except OSError:
            pass
        finally:
            os.close(self._write)

    def close(self) -> None:
        self._closed.set()
        if self._logs is not None and self._logs.poll() is None:
            self._logs.terminate()


def _kubectl_of(handle: dict) -> list[str]:
    return [handle.get("kubectl") or "kubectl",
            *([f"--context={handle['context']}"] if handle.get("context") else [])]


def engine_state(handle: dict) -> tuple[str, str]:
    """A detached TFJob's or JobSet's state as its controller reports it: (run state, note)."""
    argv = _kubectl_of(handle) + ["get", handle["kind"], handle["name"], "-n",
                                  handle["namespace"], "-o", "json"]
    try:
        done = subprocess.run(argv, capture_output=True, text=True, timeout=60)
    except (OSError, subprocess.TimeoutExpired) as e:
        return "running", f"kubectl failed: {e}"
    if done.returncode != 0:
        if "NotFound" in done.stderr or "not found" in done.stderr:
            return "lost", f"{handle['kind']} {handle['name']} no longer exists"
        return "running", f"kubectl failed: {done.stderr.strip()}"
    status = json.loads(done.stdout).get("status", {})
    done_as = {c.get("type"): c for c in status.get("conditions", [])
               if c.get("status") == "True"}
    for kind, state in (("Completed", "succeeded"), ("Succeeded", "succeeded"),
                        ("Failed", "failed")):
        if kind in done_as:
            message = done_as[kind].get("message")
            return state, f"{handle['kind']} {handle['name']}: {kind}" + \
                (f" ({message})" if message else "")
    return "running", f"{handle['kind']} {handle['name']} is active"


def engine_tasks(handle: dict) -> list[dict]:
    """One row per pod of a detached run (newest pod of each task), for ``launch status``."""
    argv = _kubectl_of(handle) + ["get", "pods", "-n", handle["namespace"], "-l",
                                  f"{LABEL}/run={handle['run']}", "-o", "json"]
    try:
        done = subprocess.run(argv, capture_output=True, text=True, timeout=60)
        pods = json.loads(done.stdout).get("items", []) if done.returncode == 0 else []
    except (OSError, subprocess.TimeoutExpired, ValueError):
        return []
    index_label = INDEX_LABELS["tfjob" if handle["kind"] == "tfjob" else "jobset"]
    newest: dict[str, dict] = {}
    for pod in sorted(pods, key=lambda p: p["metadata"].get("creationTimestamp", "")):
        labels = pod["metadata"].get("labels", {})
        newest[f"{labels.get(f'{LABEL}/role')}:{labels.get(index_label)}"] = pod
    rows = []
    for name, pod in newest.items():
        code = KubernetesHandle.exit_code(pod)
        rows.append({"task": name, "address": pod["metadata"]["name"],
                     "state": pod.get("status", {}).get("phase", "Pending") if code is None
                     else str(code), "duration": 0.0, "restarts": 0, "log": "-"})
    return rows


def delete_run(handle: dict, wait: float = 120.0) -> None:
    """``launch cancel`` of a detached TFJob or JobSet: delete it and wait until every pod
    of the run is gone (the controller deletes its Jobs and pods with it)."""
    ns = ["-n", handle["namespace"]]
    subprocess.run(_kubectl_of(handle) + ["delete", handle["kind"], handle["name"], *ns,
                                          "--ignore-not-found", "--wait=true",
                                          f"--timeout={int(wait)}s"],
                   capture_output=True, text=True, timeout=wait + 30)
    for kind in handle.get("also") or []:       # a PodGroup
        subprocess.run(_kubectl_of(handle) + ["delete", kind, handle["name"], *ns,
                                              "--ignore-not-found"],
                       capture_output=True, text=True, timeout=wait + 30)
    subprocess.run(_kubectl_of(handle) + ["wait", "--for=delete", "pods", *ns, "-l",
                                          f"{LABEL}/run={handle['run']}",
                                          f"--timeout={int(wait)}s"],
                   capture_output=True, text=True, timeout=wait + 30)


def object_bytes(obj: dict) -> int:
    """The object's size as the API server gets it (compact JSON)."""
    return len(json.dumps(obj, separators=(",", ":")).encode())


def render_yaml(objects: list[dict]) -> str:
    """YAML documents (``---`` between them); JSON when PyYAML is not installed (kubectl
    reads both)."""

    try:
        import yaml
    except ImportError:
        return json.dumps({"apiVersion": "v1", "kind": "List", "items": objects}, indent=2)
    return "---\n".join(yaml.safe_dump(o, sort_keys=False, default_flow_style=False)
                        for o in objects)


BACKEND = KubernetesBackend
