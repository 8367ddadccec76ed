"""Launch overhead: `launch` against a plain shell script, side by side, for N trivial tasks.

For N tasks that each record when they start and end (then sleep a moment), it measures:
- start: from invoking the launcher (or the shell script) to the last task started;
- reap: from the last task's end to the launcher (or script) exiting;
and `launch --help` time and the launcher's peak memory (RSS) during the N=64 run.
Rounds alternate launch and shell so both see the same machine load; medians are reported.

    .venv/bin/python bench/launch_overhead.py [--rounds 5] [--sizes 5 16 64]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import psutil

LAUNCH = str(Path(sys.executable).parent / "launch")
SH_TASK = ('date +%s.%N > "$STAMPS/$ID.start"; sleep {sleep}; '
           'date +%s.%N > "$STAMPS/$ID.end"')
PY_TASK = (sys.executable + " -c \"import os,time;d=os.environ['STAMPS']+'/'+os.environ['ID'];"
           "open(d+'.start','w').write(repr(time.time()));time.sleep({sleep});"
           "open(d+'.end','w').write(repr(time.time()))\"")
TASK = SH_TASK


def stamps(folder: Path, kind: str) -> list[float]:
    return [float(p.read_text()) for p in folder.glob(f"*.{kind}")]


def run_launch(n: int, work: Path, sleep: float) -> tuple[float, float, float]:
    stamps_dir = work / "stamps"
    stamps_dir.mkdir()
    spec = {"name": "bench", "cluster": {"chief": 1, **({"worker": n - 1} if n > 1 else {})},
            "command": ["sh", "-c", "ID=$TFCLUSTER_TASK; export ID; " + TASK.format(sleep=sleep)],
            "model_dir": str(work / "model"), "run_dir": str(work / "runs"),
            "env": {"STAMPS": str(stamps_dir)}}
    (work / "spec.json").write_text(json.dumps(spec))
    peak = [0]
    t0 = time.time()
    proc = subprocess.Popen([LAUNCH, str(work / "spec.json"), "--quiet"],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    sampler = threading.Thread(target=_sample_rss, args=(proc.pid, peak), daemon=True)
    sampler.start()
    proc.wait()
    t_exit = time.time()
    assert proc.returncode == 0, f"launch failed ({proc.returncode})"
    starts, ends = stamps(stamps_dir, "start"), stamps(stamps_dir, "end")
    assert len(starts) == n and len(ends) == n
    return max(starts) - t0, t_exit - max(ends), peak[0] / 2**20


def _sample_rss(pid: int, peak: list[int]) -> None:
    try:
        p = psutil.Process(pid)
        while p.is_running() and p.status() != psutil.STATUS_ZOMBIE:
            peak[0] = max(peak[0], p.memory_info().rss)
            time.sleep(0.01)
    except psutil.NoSuchProcess:
        pass


def run_shell(n: int, work: Path, sleep: float) -> tuple[float, float]:
    stamps_dir = work / "stamps"
    stamps_dir.mkdir()
    script = ("for i in $(seq 1 {n}); do ID=task$i sh -c '{task}' & done; wait"
              .format(n=n, task=TASK.format(sleep=sleep).replace("'", "'\\''")))
    t0 = time.time()
    subprocess.run(["sh", "-c", script], check=True, env={**os.environ, "STAMPS": str(stamps_dir)})
    t_exit = time.time()
    starts, ends = stamps(stamps_dir, "start"), stamps(stamps_dir, "end")
    assert len(starts) == n and len(ends) == n
    return max(starts) - t0, t_exit - max(ends)


def help_time(rounds: int) -> float:
    times = []
    for _ in range(rounds):
        t0 = time.perf_counter()
        subprocess.run([LAUNCH, "--help"], stdout=subprocess.DEVNULL, check=True)
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--sizes", type=int, nargs="+", default=[5, 16, 64])
    ap.add_argument("--sleep", type=float, default=0.5)
    ap.add_argument("--task", choices=["sh", "python"], default="python",
                    help="what a trivial task is: a shell or a Python process")
    args = ap.parse_args()
    global TASK
    TASK = PY_TASK if args.task == "python" else SH_TASK
    print(f"trivial task: {args.task}")
    print(f"launch --help: {help_time(args.rounds) * 1000:.0f} ms (median of {args.rounds})")
    print(f"{'N':>4} {'launch start':>13} {'shell start':>12} {'ratio':>6} "
          f"{'launch reap':>12} {'shell reap':>11} {'launcher RSS':>13}")
    for n in args.sizes:
        ls, lr, ss, sr, rss = [], [], [], [], []
        for _ in range(args.rounds):
            with tempfile.TemporaryDirectory() as d:
                a, b, m = run_launch(n, Path(d), args.sleep)
                ls.append(a)
                lr.append(b)
                rss.append(m)
            with tempfile.TemporaryDirectory() as d:
                a, b = run_shell(n, Path(d), args.sleep)
                ss.append(a)
                sr.append(b)
        med = statistics.median
        print(f"{n:>4} {med(ls) * 1000:>10.0f} ms {med(ss) * 1000:>9.0f} ms "
              f"{med(ls) / med(ss):>6.2f} {med(lr) * 1000:>9.0f} ms {med(sr) * 1000:>8.0f} ms "
              f"{max(rss):>10.1f} MB")


if __name__ == "__main__":
    main()
