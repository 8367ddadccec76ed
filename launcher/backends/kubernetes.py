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

The pieces: the objects as plain data (launcher/backends/kubernetes_objects.py), the words
and kubectl (kubernetes_options.py), ``--detach``'s submitter (kubernetes_submit.py) and
the follower of a detached run (kubernetes_follow.py).
"""

from __future__ import annotations

import dataclasses
import json
import os
import signal
import subprocess
import threading
import time
from typing import Any

from launcher.backends.base import Backend, ProbeResult, TaskHandle
from launcher.backends.engine import EngineJob
from launcher.backends.kubernetes_objects import JobObjects
from launcher.backends.kubernetes_options import (
    CONTAINER,
    INDEX_LABELS,
    LABEL,
    LAST_APPLIED_BYTES,
    MAX_OBJECT_BYTES,
    POLL_EVERY,
    Kubectl,
    KubernetesOptions,
    k8s_name,
    object_bytes,
    pod_exit_code,
    render_yaml,
)
from launcher.checks import Address
from launcher.errors import PreflightError, SpecError
from launcher.plan import IMAGE_SITE, JobPlan, NoticeRoute, Reservation, TaskPlan

__all__ = ["LAST_APPLIED_BYTES", "MAX_OBJECT_BYTES", "KubernetesBackend", "KubernetesOptions",
           "object_bytes"]


class KubernetesBackend(Backend, EngineJob):
    """Renders the job's objects (a TFJob, a JobSet, or plain Jobs and Services), applies
    them through kubectl and follows their pods."""

    name = "kubernetes"
    OPTIONS = KubernetesOptions
    ports_picked_at_start = False      # every pod listens on kubernetes.port
    options: KubernetesOptions
    reachable = False   # pod addresses are cluster-internal: the engine's state alone
    # a pod hears only SIGTERM (its deletion), with no launcher beside it: the chief saves
    # on it, the ps serves on while the chief answers (docs/preemption.md)
    notice = NoticeRoute("URG,TERM", IMAGE_SITE, signal.SIGTERM)

    def __init__(self, options: KubernetesOptions | None = None, *, remap: bool = False,
                 inside_job: bool = False):
        super().__init__(options or KubernetesOptions(), remap=remap, inside_job=inside_job)
        self.render = JobObjects(self.options)     # the job's objects, once accepted
        self.kubectl = Kubectl(self.options.kubectl, self.options.context)
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
        self._check_name_lengths(reservation.name, k8s_name(reservation.name),
                                 max(reservation.roles.values()))
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
        self.render = JobObjects(self.options, k8s_name(reservation.name), reservation.roles,
                                 dict(reservation.restart))

    def _check_name_lengths(self, name: str, job: str, longest: int) -> None:
        worst = f"{job}-evaluator-{'0-' if self.options.mode == 'jobset' else ''}" \
                f"{longest - 1}"
        if len(worst) > 63:
            raise SpecError("name", f"{name!r} is too long for Kubernetes: pod names "
                                    f"like {worst!r} must be at most 63 characters")

    def place(self, role: str, index: int, address: Address) -> Address:
        """Every task is its pod, at its DNS name and ``kubernetes.port``: the plan then
        carries the TF_CONFIG each pod gets."""
        return dataclasses.replace(address, host=self.render.pod_host(role, index),
                                   port=self.options.port)

    def allocate_port(self, host: str) -> int:
        return self.options.port

    def objects(self, plan: JobPlan, redact: bool = True) -> list[dict]:
        """The job's objects (launcher/backends/kubernetes_objects.py)."""
        return self.render.objects(plan, redact)

    def describe(self, plan: JobPlan) -> str:
        return render_yaml(self.objects(plan, redact=True))

    # ------------------------------------------------------------------ kubectl
    def preflight(self, plan: JobPlan) -> None:
        self.plan = plan
        self.kubectl.check_cluster(self.options.mode)

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
        self.kubectl.apply(self.objects(self.plan, redact=False))
        self.applied = True

    def run_handle(self) -> dict[str, Any]:
        return {} if self.plan is None else self.render.handle(self.plan.run_id)

    def start(self, task: TaskPlan) -> TaskHandle:
        if self.options.mode == "jobset" and any(p.policy != "never"
                                                 for p in self.render.restart.values()):
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
                run = self.render.labels(run_id=self.plan.run_id)[f"{LABEL}/run"]
                done = self.kubectl.run("get", "pods", "-n", self.options.namespace, "-l",
                                        f"{LABEL}/run={run}", "-o", "json")
                if done.returncode == 0:
                    self._pods = json.loads(done.stdout).get("items", [])
                self._pods_at = time.monotonic()
            return self._pods

    def stop_task(self, task: TaskPlan, pod: str | None, sig: int) -> None:
        force = ["--grace-period=0", "--force"] if sig == signal.SIGKILL else []
        ns = ["-n", self.options.namespace, "--ignore-not-found", "--wait=false"]
        if self.options.mode == "plain":      # a deleted pod would be replaced by its Job
            self.kubectl.run("delete", "job", f"{self.render.job}-{task.type}", *ns, *force)
        elif pod:
            self.kubectl.run("delete", "pod", pod, *ns, *force)

    def close(self) -> None:
        """Delete every object of the job (the logs are in the run directory already)."""
        for handle in self.handles:
            handle.close()
        if self.applied:
            self.kubectl.run("delete", self.render.kinds(), "-n", self.options.namespace,
                             "-l", f"{LABEL}/job={self.render.job}", "--ignore-not-found",
                             "--wait=false")
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

    def poll(self) -> int | None:
        pod = self.pod()
        if pod is None or pod["metadata"].get("deletionTimestamp"):
            return -self.stopped_by if self.stopped_by and pod is None else None
        status = pod_exit_code(pod)
        if status is not None and self.stopped_by and status:
            return -self.stopped_by
        return status

    def signal(self, sig: int) -> None:
        if sig not in (signal.SIGTERM, signal.SIGKILL, signal.SIGINT, signal.SIGHUP):
            return                                    # only deletion reaches a pod
        pod = self.pod()
        if pod is not None and pod_exit_code(pod) is not None:
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
                        self.backend.kubectl.argv("logs", "-f", "-n",
                                                  self.backend.options.namespace,
                                                  pod["metadata"]["name"], "-c", CONTAINER),
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



BACKEND = KubernetesBackend
