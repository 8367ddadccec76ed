"""Scripts that save on a timer and do not stop by themselves, ended at max_steps: steps
past max_steps in the final checkpoint, seconds from max_steps reached to `launch`
exiting, and the verdict, with a launcher before the save request at max_steps
(``--before DIR``: a checkout of it) and this one, side by side in one run, round after
round.

    PYTHONPATH=. .venv/bin/python bench/save_at_max_steps.py --before /work/main [--load 2]

Jobs (tests/ending/jobs/, chief + worker + ps, local backend): a stock Estimator with
RunConfig's defaults and no TrainSpec.max_steps, a TF1 MonitoredTrainingSession loop with
its default save_checkpoint_secs and no StopAtStepHook (TensorFlow 2.15), a
ParameterServerStrategy loop saving every 600 s that asks ``requested()`` (2.21); a
MultiWorkerMirroredStrategy loop through PreemptionCheckpointHandler (2 workers, 2.21).
``--cases TEXT``: only the jobs whose name has TEXT.
``--load N``: N CPU-bound processes (``yes > /dev/null``) run beside the jobs, ended at the
end. "max_steps reached" is the first of the coordinator's ``finish`` and the
``save_request`` events in events.jsonl; both it and the exit are wall clock.
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

REPO = Path(__file__).resolve().parent.parent
LAUNCH = str(REPO / ".venv" / "bin" / "launch")
JOBS = REPO / "tests" / "ending" / "jobs"
CASES = {
    "Estimator, RunConfig defaults, no TrainSpec.max_steps":
        (str(REPO / ".venv" / "bin" / "python"), "estimator_no_max_steps.py", {}),
    "TF1 MonitoredTrainingSession, default save secs, no StopAtStepHook":
        (str(REPO / ".venv" / "bin" / "python"), "tf1_no_stop.py", {}),
    "PSS custom loop, saves every 600 s, asks requested()":
        (str(REPO / ".venv-tf2" / "bin" / "python"), "pss_timer_saves.py",
         {"strategy": "parameter_server"}),
    "MWMS custom loop with PreemptionCheckpointHandler, no save of its own (2 workers)":
        (str(REPO / ".venv-tf2" / "bin" / "python"), "mwms_preemption_handler.py",
         {"cluster": {"worker": 2}}),
}


def run_case(code: str, python: str, script: str, extra: dict, max_steps: int,
             timeouts: dict, work: Path) -> dict:
    doc = {"name": "bench", "cluster": {"chief": 1, "worker": 1, "ps": 1},
           "command": [python, str(JOBS / script)], "model_dir": str(work / "model"),
           "max_steps": max_steps, "timeouts": timeouts, **extra}
    spec = work / "cluster.json"
    spec.write_text(json.dumps(doc))
    run_dir = work / "run"
    env = dict(os.environ, PYTHONPATH=code)
    proc = subprocess.run([LAUNCH, str(spec), "--quiet", "--run-dir", str(run_dir)], env=env,
                          capture_output=True, text=True, timeout=900, cwd=work)
    ended = time.time()
    summary = json.loads((run_dir / "summary.json").read_text())
    events = [json.loads(line) for line in (run_dir / "events.jsonl").read_text().splitlines()]
    reached = min((e["time"] for e in events if e["event"] == "save_request" or (
        e["event"] == "coordinator" and e["action"] == "finish")), default=None)
    return {"status": proc.returncode, "past": summary["steps_past_max_steps"],
            "after": ended - reached if reached is not None else None,
            "training": summary["training"], "duration": summary["duration"],
            "reason": summary["reason"][:120]}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--before", required=True, help="a checkout of the launcher before")
    p.add_argument("--repeat", type=int, default=1)
    p.add_argument("--max-steps", type=int, default=800)
    p.add_argument("--load", type=int, default=0, help="CPU-bound processes beside the jobs")
    p.add_argument("--save", type=float, default=60.0, help="timeouts.save of the spec")
    p.add_argument("--cases", default="", help="run only the jobs whose name has this text")
    args = p.parse_args()
    cases = {k: v for k, v in CASES.items() if args.cases in k}
    trees = {"before": str(Path(args.before).resolve()), "after": str(REPO)}
    timeouts = {"save": args.save}
    load = [subprocess.Popen(["yes"], stdout=subprocess.DEVNULL) for _ in range(args.load)]
    results: dict[tuple[str, str], list[dict]] = {}
    try:
        with tempfile.TemporaryDirectory() as tmp:
            for round_ in range(args.repeat):
                for n, (name, (python, script, extra)) in enumerate(cases.items()):
                    for which, code in trees.items():
                        work = Path(tmp) / f"{round_}-{n}-{which}"
                        work.mkdir(parents=True)
                        r = run_case(code, python, script, extra, args.max_steps, timeouts,
                                     work)
                        results.setdefault((name, which), []).append(r)
                        print(f"{name} [{which}]: {r}", file=sys.stderr, flush=True)
    finally:
        for proc in load:
            proc.kill()
            proc.wait()
    print(f"max_steps {args.max_steps}, timeouts.save {args.save:g}s, {args.load} CPU-bound "
          f"processes beside, {args.repeat} run(s) each (median)\n")
    print("| job | before: steps past max_steps / max_steps → exit / verdict "
          "| after: steps past max_steps / max_steps → exit / verdict |")
    print("|---|---|---|")
    for name in cases:
        cells = [_cell(results[(name, which)]) for which in trees]
        print(f"| {name} | {cells[0]} | {cells[1]} |")


def _cell(runs: list[dict]) -> str:
    past = [r["past"] for r in runs if r["past"] is not None]
    after = [r["after"] for r in runs if r["after"] is not None]
    middle = statistics.median(past) if past else None
    past_text = "no checkpoint" if middle is None else f"{middle:g}" if middle >= 0 else \
        f"{-middle:g} short"
    after_text = f"{statistics.median(after):.1f} s" if after else \
        f"never seen (ended after {statistics.median(r['duration'] for r in runs):.0f} s)"
    verdicts = sorted({f"exit {r['status']} ({r['training']})" for r in runs})
    return f"{past_text} / {after_text} / {', '.join(verdicts)}"


if __name__ == "__main__":
    main()
