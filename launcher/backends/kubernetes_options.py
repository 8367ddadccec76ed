"""The Kubernetes backend's words: the spec's ``kubernetes`` section, the names and labels
its objects carry, kubectl as the options or a run's handle name it, and the objects' text
(YAML) and size. launcher/backends/kubernetes.py says how a run goes."""

from __future__ import annotations

import json
import re
import subprocess
from dataclasses import dataclass

from launcher.errors import PreflightError, SpecError
from launcher.spec.declared import STRING, STRINGS, key, line, lines, words

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

    image: str = key(STRING, "every pod's image", "tfcluster:tf2.15", parse=line,
                     check=_no_spaces)
    namespace: str = key(STRING, "", "default", parse=line, check=_dns_label)
    mode: str = key({"enum": list(MODES)}, "jobset (JobSet, maintained: the one to pick), "
                    "tfjob (Kubeflow's TFJob, training-operator v1.9, unmaintained) or plain "
                    "(indexed Jobs and Services)", "tfjob")
    service_account: str | None = key(STRING, "", None, parse=line, check=_dns_label)
    image_pull_policy: str = key({"enum": list(PULL_POLICIES)}, "", "IfNotPresent")
    port: int = key({"type": "integer", "minimum": 1, "maximum": 65535}, "every task's port",
                    2222)
    context: str | None = key(STRING, "kubectl context", None, parse=line, check=_no_spaces)
    kubectl: str = key(STRING, "the kubectl program", "kubectl", parse=line, check=_no_spaces)
    node_selector: dict[str, str] = key({"type": "object"}, "", factory=dict, parse=lines)
    image_pull_secrets: list[str] = key(STRINGS, "", factory=list, parse=words,
                                        check=_object_names)
    env_from_secrets: list[str] = key(STRINGS, "", factory=list, parse=words,
                                      check=_object_names)
    ttl_seconds_after_finished: int = key({"type": "integer", "minimum": 0}, "", 3600)
    queue: str | None = key(STRING, "Kueue's LocalQueue: the kueue.x-k8s.io/queue-name "
                            "label; the job is created suspended and Kueue starts it once "
                            "admitted", None, parse=line, check=_dns_label)
    priority_class: str | None = key(STRING, "every pod's PriorityClass (priorityClassName)",
                                     None, parse=line, check=_dns_label)
    pod_group: str | None = key({"enum": [None, *POD_GROUPS]}, "gang scheduling: a PodGroup "
                                "of every task for volcano or coscheduling "
                                "(scheduler-plugins)", None)



def k8s_name(text: str) -> str:
    """A DNS-1123 label from the spec's name: lower case, '-' for anything else."""
    name = re.sub(r"[^a-z0-9-]+", "-", text.lower()).strip("-")
    return name or "job"


def quantity(memory: str) -> str:
    """The spec's memory ('4G', '512M', '2Gi') as a Kubernetes quantity ('K' is 'k' there)."""
    return memory[:-1] + "k" if memory.endswith("K") else memory



@dataclass(frozen=True)
class Kubectl:
    """kubectl as the spec's options (or a run's handle) name it: program and context."""

    program: str = "kubectl"
    context: str | None = None

    def argv(self, *args: str) -> list[str]:
        return [self.program, *([f"--context={self.context}"] if self.context else []), *args]

    def run(self, *args: str, stdin: str | None = None,
            timeout: float = 60) -> subprocess.CompletedProcess:
        """One kubectl call; never raises for a failed, missing or hung kubectl."""
        argv = self.argv()
        try:
            return subprocess.run(argv + list(args), input=stdin, capture_output=True,
                                  text=True, timeout=timeout)
        except FileNotFoundError:
            return subprocess.CompletedProcess(argv, 127, "", f"{argv[0]}: not found")
        except subprocess.TimeoutExpired:
            return subprocess.CompletedProcess(argv, 124, "", "kubectl timed out")

    def check_cluster(self, mode: str) -> None:
        """A cluster is configured, with the controller ``mode`` needs; PreflightError."""
        done = self.run("config", "current-context")
        if done.returncode != 0:
            raise PreflightError("no Kubernetes cluster configured for kubectl ("
                                 f"{(done.stderr or done.stdout).strip()}); print the objects "
                                 "with --dry-run and apply them yourself")
        if mode in CRDS:
            crd, what = CRDS[mode]
            done = self.run("get", "crd", crd, "-o", "name")
            if done.returncode != 0:
                raise PreflightError(f"the cluster has no {what}; set kubernetes.mode to "
                                     "\"plain\" (or install it)")

    def apply(self, objects: list[dict]) -> None:
        """``kubectl apply`` of ``objects`` (server-side where one is too large for the
        annotation of a client-side apply); PreflightError when it fails."""
        large = any(object_bytes(o) > LAST_APPLIED_BYTES for o in objects)
        done = self.run("apply", *(["--server-side"] if large else []), "-f", "-",
                        stdin=render_yaml(objects))
        if done.returncode != 0:
            raise PreflightError(f"kubectl apply failed: {done.stderr.strip()}")


def pod_exit_code(pod: dict) -> int | None:
    """The exit status of a pod's task container, once it ended (its phase else)."""
    for status in pod.get("status", {}).get("containerStatuses", []):
        if status.get("name") == CONTAINER:
            done = status.get("state", {}).get("terminated")
            if done is not None:
                return int(done.get("exitCode", 1))
    phase = pod.get("status", {}).get("phase")
    return {"Succeeded": 0, "Failed": 1}.get(phase)


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
