"""Time to the first training step with the gRPC checks on and off, on a real Estimator job
(TF 2.15).

    .venv/bin/python bench/readiness_gate.py [--rounds 3] [--workers 2] [--ps-delay 8]

The job is tests/faults/jobs/estimator_job.py (chief, ``--workers`` workers, one ps; every
trainer prints ``tfjob-progress step=N``). "Off" is the same spec with
``timeouts.unresponsive: 0`` (no gRPC checks). At commit 00cfe52 "on" also held the
trainers until every ps answered (the readiness gate): that is how the gate was measured
(docs/benchmarks.md); the gate was not kept, so today "on" measures what the liveness
probe costs a job's start. Rounds alternate on and off, so the noise of a shared machine
falls on both alike. Figures,
from starting `launch`: the first step of any trainer, and the moment every trainer trained
(its first step); medians over the rounds, each round's figures too. ``--ps-delay S``: the
ps sleeps S seconds before it starts TensorFlow (a slow host, an image pull).
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "tests" / "faults"))

from harness import LaunchRun, job_spec, write_spec  # noqa: E402


def one(gate: bool, workers: int, workdir: Path, ps_delay: float
        ) -> tuple[float | None, float | None, int]:
    tmp = Path(tempfile.mkdtemp(prefix="gate-" if gate else "nogate-", dir=workdir))
    doc = job_spec("estimator", tmp, max_steps=200, save_steps=100, workers=workers,
                   sleep=0.02)
    doc["timeouts"].update(finish=5, unresponsive=30 if gate else 0)
    doc["env"]["FAULT_PS_DELAY"] = str(ps_delay)
    run = LaunchRun(write_spec(tmp, doc))
    status = run.wait(timeout=300)
    first: dict[str, float] = {}
    for t, task, _ in run.steps():
        first.setdefault(task, t - run.started)
    trainers = 1 + workers
    any_step = min(first.values()) if first else None
    all_steps = max(first.values()) if len(first) == trainers else None
    return any_step, all_steps, status if status is not None else -1


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--workers", type=int, default=2)
    p.add_argument("--ps-delay", type=float, default=0.0,
                   help="the ps sleeps this long before starting (a slow host)")
    args = p.parse_args(argv)
    workdir = Path(tempfile.mkdtemp(prefix="readiness-gate-"))
    rows: dict[bool, list[tuple[float | None, float | None, int]]] = {True: [], False: []}
    for i in range(args.rounds):
        for gate in ((True, False) if i % 2 == 0 else (False, True)):
            row = one(gate, args.workers, workdir, args.ps_delay)
            rows[gate].append(row)
            fmt = ["-" if v is None else f"{v:.1f}s" for v in row[:2]]
            print(f"round {i} {'checks on ' if gate else 'checks off'}: first step {fmt[0]}, every "
                  f"trainer trained {fmt[1]}, exit {row[2]}", flush=True)
            time.sleep(1)
    for gate in (True, False):
        firsts = [r[0] for r in rows[gate] if r[0] is not None]
        alls = [r[1] for r in rows[gate] if r[1] is not None]
        print(f"{'checks on ' if gate else 'checks off'}: median first step "
              f"{statistics.median(firsts):.1f}s, median every trainer trained "
              f"{statistics.median(alls) if alls else float('nan'):.1f}s "
              f"({len(rows[gate])} runs)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
