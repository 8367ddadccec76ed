"""Slurm backend overhead: the same trivial 4-task job through the local and slurm backends.

The job: chief and 2 workers record when they start, sleep 1 s, record their end and exit
0; one ps records its start and sleeps until stopped. For each run:
- start: from invoking `launch` to the last task started (slurm: salloc, squeue/scontrol,
  the storage probes and 4 job steps);
- end: from the last trainer's end to `launch` exiting (slurm: stopping the ps step with
  scancel --signal, then cancelling the allocation and waiting until squeue lets it go).
Rounds alternate the backends; medians are reported. Starts its own Slurm cluster
(tests/infra/slurm_cluster.py: munged, slurmctld, 2 slurmd on 127.0.0.1); needs root.

    .venv/bin/python bench/slurm_overhead.py [--rounds 5]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "tests"))
from infra.slurm_cluster import SlurmCluster  # noqa: E402

LAUNCH = str(Path(sys.executable).parent / "launch")
TASK = ('date +%s.%N > "$STAMPS/$TFCLUSTER_TASK.start"; '
        'case $TFCLUSTER_TASK in ps*) exec sleep 300;; esac; '
        'sleep 1; date +%s.%N > "$STAMPS/$TFCLUSTER_TASK.end"')


def one_run(backend: str, work: Path, env: dict[str, str]) -> tuple[float, float]:
    stamps = work / "stamps"
    stamps.mkdir(parents=True)
    spec = {"name": "bench-slurm", "backend": "slurm",
            "cluster": {"chief": ["a"], "worker": ["a", "b"], "ps": ["b"]},
            "command": ["sh", "-c", TASK], "model_dir": str(work / "model"),
            "run_dir": str(work / "runs"), "env": {"STAMPS": str(stamps)}}
    (work / "spec.json").write_text(json.dumps(spec))
    t0 = time.time()
    argv = [LAUNCH, str(work / "spec.json"), "--quiet"] + (["--local"] if backend == "local"
                                                          else [])
    done = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=300)
    t_exit = time.time()
    if done.returncode != 0:
        raise SystemExit(f"{backend} run failed:\n{done.stderr}")
    starts = [float(p.read_text()) for p in stamps.glob("*.start")]
    ends = [float(p.read_text()) for p in stamps.glob("*.end")]
    assert len(starts) == 4 and len(ends) == 3, (starts, ends)
    return max(starts) - t0, t_exit - max(ends)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--rounds", type=int, default=5)
    args = p.parse_args()
    cluster = SlurmCluster(nodes=2).start()
    env = dict(os.environ, **cluster.env)
    results: dict[str, list[tuple[float, float]]] = {"local": [], "slurm": []}
    try:
        with tempfile.TemporaryDirectory() as tmp:
            for r in range(args.rounds):
                for backend in results:
                    results[backend].append(one_run(backend, Path(tmp) / f"{backend}-{r}", env))
    finally:
        cluster.stop()
    print(f"{'backend':8} {'start (median)':>15} {'end (median)':>13}   runs: start / end (s)")
    for backend, runs in results.items():
        start = statistics.median(s for s, _ in runs)
        end = statistics.median(e for _, e in runs)
        detail = ", ".join(f"{s:.2f}/{e:.2f}" for s, e in runs)
        print(f"{backend:8} {start:14.2f}s {end:12.2f}s   {detail}")


if __name__ == "__main__":
    main()
