"""tfcluster launcher: cluster spec, TF_CONFIG, backends, CLI. Never imports TensorFlow.

``launcher.run(spec)`` runs a job from Python (launcher/api.py)."""

from __future__ import annotations

__version__ = "0.1.0"


def run(spec, command=None, *, local=False, quiet=False, run_dir=None, **overrides):
    """Run the job described by ``spec`` (a path, a dict or a Spec) in this process.

    ``command`` replaces the spec's command; ``local`` maps every host to this machine;
    ``quiet`` does not stream the tasks' output; ``run_dir`` is where logs, events and the
    summary go; ``verbose=True`` also prints TensorFlow's routine output and
    ``retrain=True`` trains even when model_dir already holds the finished model; other
    keywords replace the spec's top-level keys (``max_steps=100``). Returns a
    launcher.api.RunResult (status, reason, tasks, run_dir, final_step); raises
    launcher.errors.UsageError for bad input, before anything starts."""
    from launcher.api import run as _run

    return _run(spec, command, local=local, quiet=quiet, run_dir=run_dir, **overrides)


def dry_run(spec, command=None, *, local=False, as_json=False, every=True, **overrides) -> str:
    """What ``launch SPEC --dry-run`` prints, as a string."""
    from launcher.api import dry_run as _dry_run

    return _dry_run(spec, command, local=local, as_json=as_json, every=every, **overrides)
