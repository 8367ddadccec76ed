"""The launcher's one way into model_dir: where it is as the launcher sees it, with which
storage options, and the readers built on that (checkpoints, the metrics file).

The tasks get model_dir exactly as the spec gives it. The launcher resolves it once, when
the plan is built: a relative local path is relative to the tasks' working directory
(``workdir``) when the spec sets one; S3 credentials and endpoint given to the tasks in the
spec's ``env`` serve the launcher too (its own environment is used otherwise).
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import Any

# TF2 scripts save with ``CheckpointManager.save(checkpoint_number=step)`` (as examples/
# do), so ``ckpt-N`` is read as step N. With a plain ``save()`` N counts saves, and the
# progress line shows that count; it never ends a job early: a job saves at most once per
# step, so the count never runs ahead of the step.
TF2_NUMBER_IS_STEP = True
SECRET_OPTIONS = ("key", "secret", "token")


@dataclass(frozen=True)
class ModelDir:
    """model_dir as the launcher reads it: an fsspec URL and its storage options."""

    url: str
    options: dict[str, Any] = field(default_factory=dict)
    keras: bool = False     # Keras 3's own files are the checkpoints ("keras": "jax")

    def is_local_absolute(self, given: str) -> bool:
        """``given`` (model_dir as the tasks get it) is an absolute path of this machine's
        filesystem: every local process sees the same directory, whatever its cwd."""
        return given.startswith("file://") or ("://" not in given and os.path.isabs(given))

    def reader(self):
        """A CheckpointReader of this model_dir."""
        from orchestrator.checkpoints import CheckpointReader

        return CheckpointReader(self.url, self.options, tf2_number_is_step=TF2_NUMBER_IS_STEP,
                                keras=self.keras)

    def keras_steps_unreadable(self) -> bool:
        """Keras 3's files are the checkpoints, but this Python cannot read their step (no
        h5py)."""
        from orchestrator.checkpoints import keras_steps_readable

        return self.keras and not keras_steps_readable()

    def metrics(self) -> list:
        """Every record of ``tfcluster_metrics.jsonl`` ([] when there is none)."""
        from orchestrator.metrics_file import read_metrics

        return read_metrics(self.url, self.options)

    def to_dict(self) -> dict[str, Any]:
        """As plain data, secrets masked (for --dry-run and plan.json)."""
        options = {k: ("***" if k in SECRET_OPTIONS else v) for k, v in self.options.items()}
        return {"url": self.url, "options": options}


def resolve(model_dir: str, workdir: str | None, env: dict[str, str], keras: bool = False
            ) -> ModelDir:
    """model_dir as the launcher sees it (see the module docstring); ``keras``: its
    checkpoints are Keras 3's own files."""
    url = model_dir
    if "://" not in url and not os.path.isabs(url) and workdir:
        url = os.path.join(workdir, url)
    return ModelDir(url, storage_options(model_dir, env), keras)


def storage_options(model_dir: str, env: dict[str, str]) -> dict[str, Any]:
    """fsspec options for the launcher's view of an S3 model_dir, from the tasks' env."""
    if not model_dir.startswith(("s3://", "s3a://")):
        return {}
    options: dict[str, Any] = {}
    if env.get("AWS_ACCESS_KEY_ID") and env.get("AWS_SECRET_ACCESS_KEY"):
        options.update(key=env["AWS_ACCESS_KEY_ID"], secret=env["AWS_SECRET_ACCESS_KEY"])
        if env.get("AWS_SESSION_TOKEN"):
            options["token"] = env["AWS_SESSION_TOKEN"]
    endpoint = env.get("AWS_ENDPOINT_URL_S3") or env.get("AWS_ENDPOINT_URL")
    if endpoint:
        options["client_kwargs"] = {"endpoint_url": endpoint}
    return options
