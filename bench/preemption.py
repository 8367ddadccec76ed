"""Steps lost per preemption notice, and the time from the notice to the launcher's exit.

    PYTHONPATH=. .venv/bin/python bench/preemption.py --before /tmp/tfc-before [--json F]

``--before``: a checkout of the launcher before the notice became a checkpoint (``git
worktree add --detach /tmp/tfc-before ec7c721^``); the other tree is this one. For each
tree, each job and each of three moments (the chief's logged step reaching 150, 350 and
550 of 700), one `launch` (with that tree on PYTHONPATH: the launcher and what it gives
the tasks) gets SIGTERM; then:

- reached: the newest step the trainers logged (every 10 steps) before they ended, or the
  saved step when that is newer;
- saved: the newest complete checkpoint's step in model_dir (Keras: the step of its newest
  BackupAndRestore backup, which the job prints);
- lost = reached - saved; and the seconds from the SIGTERM to `launch`'s exit.

The jobs (tests/preemption/jobs): a stock Estimator (RunConfig's defaults: a checkpoint
every 600 s), a TF1 MonitoredTrainingSession (the same default), each a chief and a ps on
TensorFlow 2.15; a Keras MultiWorkerMirroredStrategy job of two workers with
BackupAndRestore (a backup per 100-step epoch) on TensorFlow 2.21. 0.02 s of sleep per
step so that the notice lands mid-training.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
JOBS = REPO / "tests" / "preemption" / "jobs"
PY215 = str(REPO / ".venv" / "bin" / "python")
PY221 = str(REPO / ".venv-tf2" / "bin" / "python")
MAX_STEPS = 700
MOMENTS = (150, 350, 550)
STEP = re.compile(r"\bstep = (\d+)")
BACKUP = re.compile(r"backup saved: step (\d+)")
JOB_KINDS = {
    "Estimator (chief + ps)": (PY215, "stock_estimator.py", {"chief": 1, "ps": 1}, "chief-0"),
    "TF1 MonitoredTrainingSession (chief + ps)": (PY215, "stock_tf1.py",
                                                  {"chief": 1, "ps": 1}, "chief-0"),
    "Keras MWMS + BackupAndRestore (2 workers)": (PY221, "keras_mwms_backup.py",
                                                  {"worker": 2}, "worker-0"),
}


def steps_in(path: Path, pattern: re.Pattern[str] = STEP) -> list[int]:
    try:
        return [int(m.group(1)) for m in pattern.finditer(path.read_text(errors="replace"))]
    except OSError:
        return []


def one(tree: Path, kind: str, moment: int, work: Path) -> dict:
    python, script, cluster, logged_by = JOB_KINDS[kind]
    spec = {"name": "bench-preempt", "cluster": cluster, "command": [python, str(JOBS / script)],
            "model_dir": str(work / "model"), "max_steps": MAX_STEPS,
            "run_dir": str(work / "runs"), "env": {"PACE_SECS": "0.02", "LOG_STEPS": "10"},
            "timeouts": {"kill": 5, "start": 180, "stall": 600}}
    (work / "spec.json").write_text(json.dumps(spec))
    env = dict(os.environ, PYTHONPATH=str(tree), TFCLUSTER_RUNS=str(work / "root"))
    proc = subprocess.Popen([PY215, "-m", "launcher.cli", str(work / "spec.json")], cwd=tree,
                            env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 600
    while True:
        logs = list((work / "runs").glob(f"*/logs/{logged_by}.log"))
        if logs and max(steps_in(logs[0]), default=-1) >= moment:
            break
        if proc.poll() is not None or time.monotonic() > deadline:
            raise SystemExit(f"{kind}: the run ended or stalled before step {moment}")
        time.sleep(0.05)
    sent = time.perf_counter()
    proc.send_signal(signal.SIGTERM)
    status = proc.wait(timeout=600)
    took = time.perf_counter() - sent
    reached = max(max(steps_in(log), default=0)
                  for log in (work / "runs").glob("*/logs/*.log"))
    if "MWMS" in kind:
        saved = max(steps_in(logs[0], BACKUP), default=0)
    else:
        sys.path.insert(0, str(REPO))
        from orchestrator.checkpoints import newest_complete

        ckpt = newest_complete(str(work / "model"))
        saved = ckpt.step if ckpt is not None and ckpt.step is not None else 0
    reached = max(reached, saved)     # it saved past its last logged step
    return {"tree": tree.name, "job": kind, "moment": moment, "status": status,
            "reached": reached, "saved": saved, "lost": reached - saved,
            "notice_to_exit_s": round(took, 2)}


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--before", required=True, type=Path, help="the launcher's tree before")
    p.add_argument("--json", type=Path, help="also write every row here")
    p.add_argument("--jobs", nargs="*", default=list(JOB_KINDS), help="a subset of the jobs")
    args = p.parse_args()
    rows = []
    for kind in args.jobs:
        for moment in MOMENTS:
            for label, tree in (("before", args.before.resolve()), ("after", REPO)):
                with tempfile.TemporaryDirectory(prefix="bench-preempt-") as tmp:
                    row = one(tree, kind, moment, Path(tmp))
                row["tree"] = label
                rows.append(row)
                print(json.dumps(row), flush=True)
    print("\n| job | notice at step | before: saved / lost | after: saved / lost | "
          "notice → exit, before / after |")
    print("|---|---|---|---|---|")
    for kind in args.jobs:
        for moment in MOMENTS:
            b, a = (next(r for r in rows if r["job"] == kind and r["moment"] == moment and
                         r["tree"] == t) for t in ("before", "after"))
            print(f"| {kind} | {moment} | {b['saved']} / {b['lost']} | {a['saved']} / "
                  f"{a['lost']} | {b['notice_to_exit_s']} s / {a['notice_to_exit_s']} s |")
    if args.json:
        args.json.write_text(json.dumps(rows, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
