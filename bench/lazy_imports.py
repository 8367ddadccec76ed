"""What the API's lazy imports save: ``launch SPEC --dry-run`` in a fresh interpreter, as
it is (the modules only a run needs imported inside launcher/api.py's functions) and with
those modules imported first, rounds alternating, medians reported. Each function-local
import in launcher/api.py names this measurement.

    PYTHONPATH=$PWD .venv/bin/python bench/lazy_imports.py [SPEC] [--rounds 11]
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import time

# what only a run (not --dry-run, not --detach's submission) imports from launcher/api.py
RUN_ONLY = ("launcher.job", "launcher.tensorboard", "launcher.backends.storage_check",
            "launcher.monitors.coordinator", "launcher.monitors.deadline",
            "launcher.monitors.liveness", "orchestrator.coordinator",
            "launcher.output.closing_report", "launcher.output.terminal")


def timed(code: str) -> float:
    t0 = time.perf_counter()
    subprocess.run([sys.executable, "-c", code], stdout=subprocess.DEVNULL, check=True)
    return time.perf_counter() - t0


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("spec", nargs="?", default="cluster_specs/estimator.json")
    p.add_argument("--rounds", type=int, default=11)
    a = p.parse_args()
    dry = f"from launcher import cli\ncli.main([{a.spec!r}, '--dry-run'])"
    codes = {"lazy (as it is)": dry,
             "run-only imported first": f"import {', '.join(RUN_ONLY)}\n{dry}"}
    times: dict[str, list[float]] = {k: [] for k in codes}
    for _ in range(a.rounds):
        for name, code in codes.items():
            times[name].append(timed(code))
    medians = {k: statistics.median(v) for k, v in times.items()}
    for name, m in medians.items():
        print(f"launch {a.spec} --dry-run, {name}: {m * 1000:.0f} ms (median of {a.rounds})")
    lazy, eager = medians.values()
    print(f"ratio: {eager / lazy:.2f}")


if __name__ == "__main__":
    main()
