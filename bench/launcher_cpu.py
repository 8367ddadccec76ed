"""The launcher's CPU: the Estimator example under `launch` against the very same processes
started by hand, side by side.

Each round runs the example (cluster_specs/estimator.json: chief, 2 workers, ps, evaluator)
twice, in alternating order, into a fresh model_dir:
- launch: `launch SPEC --quiet`; CPU = the launcher and every task it started;
- by hand: every task of the plan that `launch SPEC --dry-run --json` prints, started with
  its TF_CONFIG and environment by this script, which waits for the chief, the workers and
  the evaluator to exit and then ends the ps with SIGTERM (what a user's script does).
CPU is user + system time of all the processes (RUSAGE_CHILDREN of a fresh runner process),
so a busy machine changes it far less than it changes wall time.

    .venv/bin/python bench/launcher_cpu.py [--rounds 3]
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
LAUNCH = str(Path(sys.executable).parent / "launch")
SPEC = REPO / "cluster_specs" / "estimator.json"


def spec_in(work: Path) -> Path:
    doc = json.loads(SPEC.read_text())
    doc.update(model_dir=str(work / "model"), run_dir=str(work / "runs"),
               command=[sys.executable, str(REPO / "examples" / "estimator" / "train.py")])
    path = work / "spec.json"
    path.write_text(json.dumps(doc))
    return path


BY_HAND = r"""
import json, os, signal, subprocess, sys
plan = json.load(open(sys.argv[1]))
procs = {}
for t in plan["tasks"]:
    env = dict(os.environ, **t["env"])
    procs[f"{t['type']}:{t['index']}"] = subprocess.Popen(
        t["command"], env=env, cwd=t["cwd"], stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL, start_new_session=True)
for name, p in procs.items():
    if not name.startswith("ps:"):
        p.wait()
for name, p in procs.items():
    if name.startswith("ps:"):
        p.send_signal(signal.SIGTERM)
        p.wait()
"""

MEASURE = r"""
import resource, subprocess, sys
subprocess.run(sys.argv[1:], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
r = resource.getrusage(resource.RUSAGE_CHILDREN)
print(r.ru_utime + r.ru_stime)
"""


def cpu_of(argv: list[str]) -> float:
    """User + system seconds of ``argv`` and everything it waited for."""
    out = subprocess.run([sys.executable, "-c", MEASURE, *argv], capture_output=True,
                         text=True, check=True, cwd=REPO)
    return float(out.stdout.strip().splitlines()[-1])


def run_launch(work: Path) -> float:
    return cpu_of([LAUNCH, str(spec_in(work)), "--quiet"])


def run_by_hand(work: Path) -> float:
    spec = spec_in(work)
    plan = subprocess.run([LAUNCH, str(spec), "--dry-run", "--json"], capture_output=True,
                          text=True, check=True, cwd=REPO).stdout
    (work / "plan.json").write_text(plan)
    return cpu_of([sys.executable, "-c", BY_HAND, str(work / "plan.json")])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=3)
    args = ap.parse_args()
    launch, hand = [], []
    for i in range(args.rounds):
        order = [("launch", run_launch, launch), ("by hand", run_by_hand, hand)]
        for name, fn, into in (order if i % 2 == 0 else order[::-1]):
            with tempfile.TemporaryDirectory() as d:
                into.append(fn(Path(d)))
            print(f"round {i + 1}: {name} {into[-1]:.1f} s CPU", flush=True)
    med = statistics.median
    print(f"CPU, median of {args.rounds}: launch {med(launch):.1f} s, by hand {med(hand):.1f} s, "
          f"ratio {med(launch) / med(hand):.3f}")
    print(f"self time of the benchmark's own runner (ignored): "
          f"{resource.getrusage(resource.RUSAGE_SELF).ru_utime:.2f} s; pid {os.getpid()}")


if __name__ == "__main__":
    main()
