"""Kubernetes backend: render the job as Kubernetes objects, apply them with kubectl, follow
the pods.

Two renderings (``kubernetes.mode``):
- ``tfjob``: one Kubeflow TFJob (kubeflow.org/v1). The training operator gives every pod
  its TF_CONFIG; ``runPolicy.cleanPodPolicy: Running`` deletes the ps (and any pod still
  running) once the job succeeded, which the chief's success decides (``successPolicy``).
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

import json
import os
import re
import signal
import subprocess
import threading
import time
from dataclasses import dataclass, field
from typing import Any

from launcher.backends.base import Backend, ProbeResult, TaskHandle
from launcher.errors import PreflightError, SpecError
from launcher.plan import JobPlan, TaskPlan
from launcher.redact import redact_env
from launcher.spec import (
    Address,
    Spec,
    check_keys,
    expect_dict,
    expect_int,
    expect_str,
)

OPTION_KEYS = ("image", "namespace", "mode", "service_account", "image_pull_policy", "port",
               "context", "kubectl", "node_selector", "image_pull_secrets", "env_from_secrets",
               "ttl_seconds_after_finished")
MODES = ("tfjob", "plain")
PULL_POLICIES = ("Always", "IfNotPresent", "Never")
CONTAINER = "tensorflow"          # the operator's default container name
PORT_NAME = "tfjob-port"          # the operator reads the port from this container port
REPLICA_TYPES = {"chief": "Chief", "master": "Master", "worker": "Worker", "ps": "PS",
                 "evaluator": "Evaluator"}
LABEL = "tfcluster.io"
INDEX_LABELS = {"tfjob": "training.kubeflow.org/replica-index",
                "plain": "batch.kubernetes.io/job-completion-index"}
INDEX_ENV = "TFCLUSTER_INDEX"
_DNS_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
POLL_EVERY = 1.0                  # seconds between `kubectl get pods` calls


@dataclass
class KubernetesOptions:
    """The spec's ``kubernetes`` section."""

    image: str = "tfcluster:tf2.15"
    namespace: str = "default"
    mode: str = "tfjob"
    service_account: str | None = None
    image_pull_policy: str = "IfNotPresent"
    port: int = 2222
    context: str | None = None
    kubectl: str = "kubectl"
    node_selector: dict[str, str] = field(default_factory=dict)
    image_pull_secrets: list[str] = field(default_factory=list)
    env_from_secrets: list[str] = field(default_factory=list)
    ttl_seconds_after_finished: int = 3600


def k8s_name(text: str) -> str:
    """A DNS-1123 label from the spec's name: lower case, '-' for anything else."""
    name = re.sub(r"[^a-z0-9-]+", "-", text.lower()).strip("-")
    return name or "job"


def quantity(memory: str) -> str:
    """The spec's memory ('4G', '512M', '2Gi') as a Kubernetes quantity ('K' is 'k' there)."""
    return memory[:-1] + "k" if memory.endswith("K") else memory


def _names(items: Any, where: str) -> list[str]:
    if not isinstance(items, list):
        raise SpecError(where, "must be a list of names")
    out = []
    for i, item in enumerate(items):
        value = expect_str(item, f"{where}[{i}]")
        if not _DNS_LABEL.match(value):
            raise SpecError(f"{where}[{i}]", f"{value!r} is not a Kubernetes object name")
        out.append(value)
    return out


class KubernetesBackend(Backend):
    """Renders a TFJob (or plain Jobs and Services) and runs it through kubectl."""

    name = "kubernetes"
    options: KubernetesOptions
    reachable = False   # pod addresses are cluster-internal: the engine's state alone

    def __init__(self, spec: Spec, options: KubernetesOptions | None = None):
        super().__init__(spec, options or KubernetesOptions())
        self.job = k8s_name(spec.name)
        self._check_name_lengths()
        for role, policy in spec.restart.items():
            if policy.policy != "never":
                raise SpecError(f"restart.{role}", "the kubernetes backend does not restart "
                                                   "tasks: the pods' controller owns them")
        self._place_tasks_at_pods()
        self.plan: JobPlan | None = None
        self.applied = False
        self._pods: list[dict] = []
        self._pods_at = 0.0
        self._lock = threading.Lock()
        self.handles: list[KubernetesHandle] = []

    # ------------------------------------------------------------------ spec
    @classmethod
    def validate_options(cls, raw: dict[str, Any] | None, field: str) -> KubernetesOptions:
        raw = expect_dict(raw or {}, field)
        check_keys(raw, OPTION_KEYS, field)
        o = KubernetesOptions()
        for key in ("image", "context", "kubectl"):
            if key in raw:
                value = expect_str(raw[key], f"{field}.{key}")
                if any(c.isspace() for c in value):
                    raise SpecError(f"{field}.{key}", f"{value!r} must not contain spaces")
                setattr(o, key, value)
        for key in ("namespace", "service_account"):
            if key in raw:
                value = expect_str(raw[key], f"{field}.{key}")
                if not _DNS_LABEL.match(value) or len(value) > 63:
                    raise SpecError(f"{field}.{key}", f"{value!r} is not a valid Kubernetes "
                                                      "name (lower case letters, digits, '-')")
                setattr(o, key, value)
        if "mode" in raw:
            o.mode = expect_str(raw["mode"], f"{field}.mode")
            if o.mode not in MODES:
                raise SpecError(f"{field}.mode", f"must be one of {', '.join(MODES)}, got "
                                                 f"{o.mode!r}")
        if "image_pull_policy" in raw:
            o.image_pull_policy = expect_str(raw["image_pull_policy"],
                                             f"{field}.image_pull_policy")
            if o.image_pull_policy not in PULL_POLICIES:
                raise SpecError(f"{field}.image_pull_policy",
                                f"must be one of {', '.join(PULL_POLICIES)}, got "
                                f"{o.image_pull_policy!r}")
        if "port" in raw:
            o.port = expect_int(raw["port"], f"{field}.port")
            if o.port > 65535:
                raise SpecError(f"{field}.port", f"{o.port} is outside 1-65535")
        if "ttl_seconds_after_finished" in raw:
            o.ttl_seconds_after_finished = expect_int(raw["ttl_seconds_after_finished"],
                                                      f"{field}.ttl_seconds_after_finished", 0)
        if "node_selector" in raw:
            sel = expect_dict(raw["node_selector"], f"{field}.node_selector")
            o.node_selector = {k: expect_str(v, f"{field}.node_selector.{k}", True)
                               for k, v in sel.items()}
        for key in ("image_pull_secrets", "env_from_secrets"):
            if key in raw:
                setattr(o, key, _names(raw[key], f"{field}.{key}"))
        return o

    def _check_name_lengths(self) -> None:
        longest = max(len(self.spec.cluster[j]) for j in self.spec.cluster)
        worst = f"{self.job}-evaluator-{longest - 1}"
        if len(worst) > 63:
            raise SpecError("name", f"{self.spec.name!r} is too long for Kubernetes: pod names "
                                    f"like {worst!r} must be at most 63 characters")

    def roles(self) -> dict[str, int]:
        """Role -> number of tasks, the evaluator included."""
        out = {job: len(addrs) for job, addrs in self.spec.cluster.items()}
        if self.spec.evaluator is not None:
            out["evaluator"] = 1
        return out

    def pod_host(self, role: str, index: int) -> str:
        """The DNS name of a task's pod (the operator's naming in tfjob mode)."""
        ns = self.options.namespace
        if self.options.mode == "tfjob":
            return f"{self.job}-{role}-{index}.{ns}.svc"
        return f"{self.job}-{role}-{index}.{self.job}-{role}.{ns}.svc"

    def _place_tasks_at_pods(self) -> None:
        """Every task's address becomes its pod's DNS name and port: the plan built from the
        spec then carries the TF_CONFIG each pod gets."""
        port = self.options.port
        for job, addrs in self.spec.cluster.items():
            self.spec.cluster[job] = [Address(self.pod_host(job, i), port)
                                      for i in range(len(addrs))]
        if self.spec.evaluator is not None:
            self.spec.evaluator = Address(self.pod_host("evaluator", 0), port)

    def allocate_port(self, host: str) -> int:
        return self.options.port

    # ------------------------------------------------------------------ rendering
    def objects(self, plan: JobPlan, redact: bool = True) -> list[dict]:
        """The Kubernetes objects of the job, as plain data."""
        if self.options.mode == "tfjob":
            return [self._tfjob(plan, redact)]
        out: list[dict] = []
        for role in self.roles():
            out.append(self._service(role))
            out.append(self._indexed_job(plan, role, redact))
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
        for key, value in env.items():
            value = value.replace("$(", "$$(")      # the kubelet expands $(VAR): keep literal
            if key == "TF_CONFIG":
                if mode == "tfjob":
                    continue                        # the operator sets it
                cluster = json.dumps(json.loads(value)["cluster"], separators=(",", ":"))
                value = f'{{"cluster":{cluster},"task":{{"type":"{role}","index":$({INDEX_ENV})}}}}'
            elif key == "TFCLUSTER_TASK":
                value = f"{role}:$({INDEX_ENV})"
            elif key == "TFCLUSTER_SHARD_INDEX" and value != "0":
                shift = True                        # index + 1: computed by the command
                continue
            elif key == "TFCLUSTER_SHARD_INDEX" and role == "worker":
                value = f"$({INDEX_ENV})"
            out.append({"name": key, "value": value})
        return out, shift

    def _container(self, plan: JobPlan, role: str, redact: bool) -> dict:
        task = plan.task(role, 0)
        env, shift = self._env(plan, role, redact)
        command = list(task.command)
        if shift:
            command = ["/bin/sh", "-c", f"export TFCLUSTER_SHARD_INDEX=$(({INDEX_ENV} + 1)); "
                       'exec "$@"', "sh", *command]
        c: dict[str, Any] = {"name": CONTAINER, "image": self.options.image,
                             "imagePullPolicy": self.options.image_pull_policy,
                             "command": command, "env": env,
                             "ports": [{"name": PORT_NAME, "containerPort": self.options.port}]}
        if task.cwd:
            c["workingDir"] = task.cwd
        if self.options.env_from_secrets:
            c["envFrom"] = [{"secretRef": {"name": s}} for s in self.options.env_from_secrets]
        res = dict(self.spec.resources.get("default", {}))
        res.update(self.spec.resources.get(role, {}))
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
        return spec

    def _tfjob(self, plan: JobPlan, redact: bool) -> dict:
        replicas = {}
        for role, count in self.roles().items():
            replicas[REPLICA_TYPES[role]] = {
                "replicas": count,
                "restartPolicy": "Never",
                "template": {"metadata": {"labels": self._labels(role, plan.run_id)},
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
                "runPolicy": {"cleanPodPolicy": "Running", "backoffLimit": 0,
                              "ttlSecondsAfterFinished": self.options.ttl_seconds_after_finished},
                "tfReplicaSpecs": replicas,
            },
        }

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
                     "template": {"metadata": {"labels": self._labels(role, plan.run_id)},
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
        if self.options.mode == "tfjob":
            done = self.kubectl("get", "crd", "tfjobs.kubeflow.org", "-o", "name")
            if done.returncode != 0:
                raise PreflightError("the cluster has no TFJob resource (Kubeflow training "
                                     "operator); set kubernetes.mode to \"plain\"")

    def probe(self, task: TaskPlan, argv: list[str], timeout: float) -> ProbeResult:
        return ProbeResult(125, "pods cannot be probed before they exist: set \"check_storage\""
                                ": false and give a model_dir every pod reaches (s3://, gs://, "
                                "a volume)")

    def start(self, task: TaskPlan) -> TaskHandle:
        if not self.applied:
            if self.plan is None:
                raise RuntimeError("Kubernetes backend: start() before preflight()")
            done = self.kubectl("apply", "-f", "-",
                                stdin=render_yaml(self.objects(self.plan, redact=False)))
            if done.returncode != 0:
                raise PreflightError(f"kubectl apply failed: {done.stderr.strip()}")
            self.applied = True
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
            kinds = "tfjob" if self.options.mode == "tfjob" else "job,service"
            self.kubectl("delete", kinds, "-n", self.options.namespace, "-l",
                         f"{LABEL}/job={self.job}", "--ignore-not-found", "--wait=false")
            self.applied = False


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
