"""How long the example jobs take as real local clusters, end to end through `launch`.

    .venv/bin/python bench/example_jobs.py [--repeat 2] [--examples estimator pss mwms]

Each run uses the spec from cluster_specs/ with a fresh model_dir in a temporary directory and
prints one row per example: tasks, steps, the median wall time of `launch` (start to summary),
the chief's own run time, and global steps per second of the chief's run time.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
PYTHONS = {"estimator": REPO / ".venv/bin/python", "pss": REPO / ".venv-tf2/bin/python",
           "mwms": REPO / ".venv-tf2/bin/python"}


def run_once(name: str, tmp: Path) -> dict:
    spec = json.loads((REPO / "cluster_specs" / f"{name}.json").read_text())
    spec["model_dir"] = str(tmp / "model")
    spec_path = tmp / "spec.json"
    spec_path.write_text(json.dumps(spec))
    launch = Path(sys.executable).parent / "launch"
    started = time.monotonic()
    proc = subprocess.run([str(launch), str(spec_path), "--quiet", "--run-dir", str(tmp / "run"),
                           "--", str(PYTHONS[name]), f"examples/{name}/train.py"],
                          cwd=REPO, capture_output=True, text=True)
    wall = time.monotonic() - started
    if proc.returncode != 0:
        raise SystemExit(f"{name} failed:\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}")
    summary = json.loads((tmp / "run" / "summary.json").read_text())
    plan = json.loads((tmp / "run" / "plan.json").read_text())
    chief = next(t for t in summary["tasks"] if t["task"] == "chief:0")
    return {"tasks": len(summary["tasks"]), "steps": plan["max_steps"], "wall": wall,
            "chief": chief["duration"]}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--repeat", type=int, default=2)
    p.add_argument("--examples", nargs="+", default=list(PYTHONS), choices=list(PYTHONS))
    args = p.parse_args()
    rows = [("example", "tasks", "max_steps", "launch wall s", "chief s", "steps/chief s")]
    for name in args.examples:
        runs = []
        for _ in range(args.repeat):
            with tempfile.TemporaryDirectory(prefix=f"bench-{name}-") as tmp:
                runs.append(run_once(name, Path(tmp)))
        wall = statistics.median(r["wall"] for r in runs)
        chief = statistics.median(r["chief"] for r in runs)
        steps = runs[0]["steps"]
        rows.append((name, str(runs[0]["tasks"]), str(steps), f"{wall:.1f}", f"{chief:.1f}",
                     f"{steps / chief:.0f}"))
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    for row in rows:
        print("  ".join(c.rjust(w) for c, w in zip(row, widths)))


if __name__ == "__main__":
    main()
