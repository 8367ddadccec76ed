"""``--detach`` on Kubernetes in mode tfjob or jobset: the controller (the training operator,
JobSet) runs the job to its end, so the objects are applied and the launcher returns. Plain
Jobs need the launcher to stop the ps: in mode plain a detached run keeps its launcher, as
a daemon (the registry finds no submitter for it: ``takes``)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from launcher.backends.engine import Submitter
from launcher.backends.kubernetes import KubernetesBackend
from launcher.backends.kubernetes_options import KubernetesOptions, render_yaml
from launcher.plan import JobPlan


@dataclass(frozen=True)
class Objects:
    """The batch request: the job's objects as applied, and as ``--dry-run`` shows them
    (secret values hidden)."""

    objects: tuple[dict, ...]
    shown: tuple[dict, ...]

    def text(self) -> str:
        return render_yaml(list(self.shown))


class KubernetesSubmitter(Submitter):
    """``kubectl apply`` of the objects; the handle names them."""

    backend: KubernetesBackend

    @classmethod
    def takes(cls, options: KubernetesOptions) -> bool:
        return options.mode != "plain"

    def request(self, plan: JobPlan, run_dir: str, relaunch: list[str]) -> Objects:
        render = self.backend.render
        return Objects(tuple(render.objects(plan, redact=False)),
                       tuple(render.objects(plan, redact=True)))

    def submit(self, plan: JobPlan, request: Objects) -> dict[str, Any]:
        """Apply, then return; the controller owns the job from here."""
        kubectl = self.backend.kubectl
        kubectl.check_cluster(self.backend.options.mode)
        kubectl.apply(list(request.objects))
        return self.backend.render.handle(plan.run_id)
