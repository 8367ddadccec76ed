"""Run an unmodified Estimator script so that it stops at exactly the job's max_steps.

    python -m orchestrator.at_max_steps SCRIPT.py [ARG...]

runs SCRIPT.py as ``__main__`` (as ``python SCRIPT.py ARG...`` would) after one change to
TensorFlow: every ``tf.estimator.TrainSpec`` the script builds gets ``max_steps`` from
``TFCLUSTER_MAX_STEPS`` (set by the launcher for every task). The trainers then stop at
that step by themselves (TensorFlow's StopAtStepHook: the chief saves its final checkpoint
there) and TensorFlow's evaluator exits once it evaluated it, instead of being stopped by
the launcher after the fact. A TrainSpec that gives another max_steps is overridden, and a
line on stderr says so; without TFCLUSTER_MAX_STEPS nothing is changed.

Trade-offs (docs/ending.md): the spec, not the script, decides the end; ``Estimator.train``
called directly (without TrainSpec) is not changed; an input that ends before max_steps
still ends training early; TensorFlow is imported before the script runs (the script
imports it anyway).
"""

from __future__ import annotations

import os
import runpy
import sys

ENV = "TFCLUSTER_MAX_STEPS"


def max_steps_from_env(env: dict[str, str] | None = None) -> int | None:
    value = (os.environ if env is None else env).get(ENV)
    if not value:
        return None
    try:
        steps = int(value)
    except ValueError:
        raise SystemExit(f"orchestrator.at_max_steps: {ENV}={value!r} is not an integer") from None
    return steps if steps > 0 else None


def patch_train_spec(max_steps: int) -> None:
    """Make every TrainSpec built from now on carry ``max_steps``."""
    from tensorflow_estimator.python.estimator import training

    cls = training.TrainSpec
    original = cls.__new__
    if getattr(original, "_tfcluster", False):
        return

    def __new__(klass, input_fn, max_steps_given=None, *args, **kwargs):
        if "max_steps" in kwargs:
            max_steps_given = kwargs.pop("max_steps")
        if max_steps_given is not None and max_steps_given != max_steps:
            print(f"orchestrator.at_max_steps: TrainSpec max_steps {max_steps_given} "
                  f"replaced by {ENV}={max_steps}", file=sys.stderr, flush=True)
        return original(klass, input_fn, max_steps, *args, **kwargs)

    __new__._tfcluster = True  # type: ignore[attr-defined]
    cls.__new__ = __new__


def main(argv: list[str] | None = None) -> None:
    argv = list(sys.argv[1:] if argv is None else argv)
    if not argv or argv[0] in ("-h", "--help"):
        print(__doc__.strip().splitlines()[2].strip(), file=sys.stderr)
        raise SystemExit(2 if not argv else 0)
    script = argv[0]
    if not os.path.isfile(script):
        raise SystemExit(f"orchestrator.at_max_steps: no such script: {script}")
    max_steps = max_steps_from_env()
    if max_steps is not None:
        patch_train_spec(max_steps)
    sys.argv = argv
    sys.path.insert(0, os.path.dirname(os.path.abspath(script)))
    runpy.run_path(script, run_name="__main__")


if __name__ == "__main__":
    main()
