"""Put on a task's PYTHONPATH by the launcher: arm the preemption notice
(orchestrator/preemption.py), then run the ``sitecustomize`` this one hides, if any.

Standard library only until the notice is armed; nothing at all happens unless the task's
environment asks for it (``TFCLUSTER_PREEMPT``)."""

import importlib.util
import os
import sys


def _arm():
    if not os.environ.get("TFCLUSTER_PREEMPT"):
        return
    here = os.path.dirname(os.path.abspath(__file__))
    path = os.path.join(os.path.dirname(here), "preemption.py")
    spec = importlib.util.spec_from_file_location("orchestrator.preemption", path)
    if spec is None or spec.loader is None:
        return
    module = sys.modules.get("orchestrator.preemption")
    if module is None:
        module = importlib.util.module_from_spec(spec)
        sys.modules["orchestrator.preemption"] = module
        spec.loader.exec_module(module)
    module.arm()


def _chain():
    """The next ``sitecustomize`` on sys.path after this folder (a venv's, Debian's)."""
    here = os.path.dirname(os.path.abspath(__file__))
    rest = [p for p in sys.path if os.path.abspath(p or os.curdir) != here]
    spec = None
    for entry in rest:
        candidate = os.path.join(entry or os.curdir, "sitecustomize.py")
        if os.path.isfile(candidate):
            spec = importlib.util.spec_from_file_location("sitecustomize", candidate)
            break
    if spec is None or spec.loader is None:
        return
    module = importlib.util.module_from_spec(spec)
    sys.modules["sitecustomize"] = module
    spec.loader.exec_module(module)


try:
    _arm()
except Exception as error:  # noqa: BLE001 - a task must start whatever happens here
    sys.stderr.write(f"tfcluster: the preemption notice is not armed: {error!r}\n")
_chain()
