"""A detached Kubernetes run followed by its handle (the TFJob's or JobSet's kind, name,
namespace, run label and kubectl): its state as the controller reports it, one row per pod,
and its cancel (``launch status``, ``launch cancel``)."""

from __future__ import annotations

import json
import subprocess
from typing import Any

from launcher.backends.engine import Follower
from launcher.backends.kubernetes_options import INDEX_LABELS, LABEL, Kubectl, pod_exit_code


class KubernetesFollower(Follower):
    """A run whose handle names Kubernetes objects."""

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


def _kubectl_of(handle: dict) -> list[str]:
    return Kubectl(handle.get("kubectl") or "kubectl", handle.get("context")).argv()


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
        code = pod_exit_code(pod)
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

