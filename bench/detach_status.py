"""Detached runs: how long `launch SPEC --detach` takes to return, and what `launch status`
and `launch list` cost with 1 and with 100 runs in the registry.

- detach: a local job of two stand-in tasks that run until cancelled; from invoking
  `launch --detach` to its exit (every task started by then), side by side with
  `launch --dry-run` of the same spec (parse, plan, print: the part both share). Each
  detached run is cancelled before the next round.
- status / list: a run root holding 1, then 100 finished runs (copies of one real run's
  state with distinct ids); `launch status ID`, `launch status PREFIX` (a unique prefix:
  the registry is scanned) and `launch list`, side by side with `launch --help`.
Rounds alternate the commands compared; medians in milliseconds.

    .venv/bin/python bench/detach_status.py [--rounds 7]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

LAUNCH = str(Path(sys.executable).parent / "launch")
FAKE_TASK = str(Path(__file__).resolve().parents[1] / "tests" / "local" / "fake_task.py")


def timed(argv: list[str], env: dict) -> tuple[float, str]:
    t0 = time.perf_counter()
    done = subprocess.run(argv, env=env, capture_output=True, text=True, check=True)
    return (time.perf_counter() - t0) * 1000, done.stdout


def bench_detach(work: Path, rounds: int, env: dict) -> dict[str, float]:
    spec = work / "spec.json"
    spec.write_text(json.dumps({
        "name": "bench", "cluster": {"chief": 1, "ps": 1}, "command": [sys.executable, FAKE_TASK],
        "model_dir": str(work / "model"), "max_steps": 10, "check_storage": False,
        "env": {"FAKE_PLAN": json.dumps({"chief": "forever", "ps": "forever"})}}))
    detach, dry = [], []
    for _ in range(rounds):
        ms, out = timed([LAUNCH, str(spec), "--detach"], env)
        detach.append(ms)
        subprocess.run([LAUNCH, "cancel", out.split()[1]], env=env, capture_output=True,
                       check=True)
        dry.append(timed([LAUNCH, str(spec), "--dry-run"], env)[0])
    return {"detach": statistics.median(detach), "dry-run": statistics.median(dry)}


def fill_registry(root: Path, template: dict, n: int) -> list[str]:
    shutil.rmtree(root, ignore_errors=True)
    ids = []
    for i in range(n):
        run_id = f"bench-{i:04d}{os.urandom(3).hex()}"
        (root / run_id / "logs").mkdir(parents=True)
        (root / run_id / "state.json").write_text(json.dumps(dict(template, run_id=run_id)))
        ids.append(run_id)
    return ids


def bench_status(work: Path, rounds: int, env: dict, template: dict) -> dict[int, dict]:
    out = {}
    for n in (1, 100):
        ids = fill_registry(work / "runs", template, n)
        rows: dict[str, list[float]] = {"status ID": [], "status PREFIX": [], "list": [],
                                        "--help": []}
        for _ in range(rounds):
            rows["status ID"].append(timed([LAUNCH, "status", ids[-1]], env)[0])
            rows["status PREFIX"].append(timed([LAUNCH, "status", ids[-1][:10]], env)[0])
            rows["list"].append(timed([LAUNCH, "list"], env)[0])
            rows["--help"].append(timed([LAUNCH, "--help"], env)[0])
        out[n] = {k: statistics.median(v) for k, v in rows.items()}
    return out


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--rounds", type=int, default=7)
    args = p.parse_args()
    work = Path(tempfile.mkdtemp(prefix="tfc-bench-detach-"))
    env = dict(os.environ, TFCLUSTER_RUNS=str(work / "runs"))
    try:
        d = bench_detach(work, args.rounds, env)
        print(f"launch --detach returns: {d['detach']:.0f} ms; launch --dry-run: "
              f"{d['dry-run']:.0f} ms; ratio {d['detach'] / d['dry-run']:.2f}")
        real = next((work / "runs").glob("*/state.json"))
        template = dict(json.loads(real.read_text()), state="succeeded", status=0)
        for n, row in bench_status(work, args.rounds, env, template).items():
            print(f"{n:3d} runs: " + ", ".join(f"{k} {v:.0f} ms" for k, v in row.items())
                  + f"; status ID / --help {row['status ID'] / row['--help']:.2f}")
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
