"""How a real job ends at max_steps: seconds from "max_steps reached" to `launch` exiting,
and steps past max_steps, for scripts that read TFCLUSTER_MAX_STEPS and scripts that
ignore it, with and without an evaluator (TensorFlow 2.15, chief + 2 workers + ps
[+ evaluator], local backend).

    .venv/bin/python bench/end_at_max_steps.py [--repeat 2] [--max-steps 300]

Scripts (tests/thirdparty/):
- reads:   stock_estimator.py, TrainSpec(max_steps=$TFCLUSTER_MAX_STEPS), a checkpoint every
           20 steps;
- ignores: kubeflow_keras_estimator.py, TrainSpec without max_steps, input repeated, a
           checkpoint every 50 steps;
- runner:  the same Kubeflow script under `python -m orchestrator.at_max_steps`.
The evaluator is TensorFlow's own (EvalSpec start_delay_secs=1, throttle_secs=1).
"max_steps reached" is the coordinator's ``finish`` event in events.jsonl; the end is the
moment `launch` exited (both wall clock). Cases run interleaved, round after round.
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
PY = str(REPO / ".venv" / "bin" / "python")
LAUNCH = str(REPO / ".venv" / "bin" / "launch")
THIRDPARTY = REPO / "tests" / "thirdparty"
STOCK = f'{THIRDPARTY}/stock_estimator.py --model_dir="$TFCLUSTER_MODEL_DIR" ' \
        f'--max_steps="$TFCLUSTER_MAX_STEPS"'
KUBEFLOW = f'{THIRDPARTY}/kubeflow_keras_estimator.py "$TFCLUSTER_MODEL_DIR"'
CASES = {
    "reads, no evaluator": (STOCK, False),
    "reads, evaluator": (STOCK, True),
    "ignores, no evaluator": (KUBEFLOW, False),
    "ignores, evaluator": (KUBEFLOW, True),
    "ignores + at_max_steps runner, no evaluator": (f"-m orchestrator.at_max_steps {KUBEFLOW}",
                                                    False),
}


def run_case(script: str, evaluator: bool, max_steps: int, work: Path) -> dict:
    doc = {"name": "bench", "cluster": {"chief": 1, "worker": 2, "ps": 1},
           "command": ["sh", "-c", f"exec {PY} {script}"], "model_dir": str(work / "model"),
           "max_steps": max_steps, "env": {"EVAL_DELAY": "1", "EVAL_THROTTLE": "1",
                                           "PYTHONPATH": str(REPO)}}
    if evaluator:
        doc["evaluator"] = "localhost"
    spec = work / "cluster.json"
    spec.write_text(json.dumps(doc))
    run_dir = work / "run"
    env = dict(os.environ, PYTHONPATH=str(REPO))
    proc = subprocess.run([LAUNCH, str(spec), "--quiet", "--run-dir", str(run_dir)], env=env,
                          capture_output=True, text=True, timeout=600)
    ended = time.time()
    if proc.returncode != 0:
        raise RuntimeError(f"launch exited {proc.returncode}:\n{proc.stderr[-2000:]}")
    summary = json.loads((run_dir / "summary.json").read_text())
    events = [json.loads(line) for line in (run_dir / "events.jsonl").read_text().splitlines()]
    reached = next((e["time"] for e in events if e["event"] == "coordinator"
                    and e["action"] == "finish"), None)
    return {"after_max_steps": ended - reached if reached is not None else None,
            "past": summary["steps_past_max_steps"], "duration": summary["duration"],
            "evaluated": summary["evaluated_step"], "restarts": len(summary["restarts"])}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--repeat", type=int, default=2)
    p.add_argument("--max-steps", type=int, default=300)
    args = p.parse_args()
    results: dict[str, list[dict]] = {name: [] for name in CASES}
    with tempfile.TemporaryDirectory() as tmp:
        for round_ in range(args.repeat):
            for n, (name, (script, evaluator)) in enumerate(CASES.items()):
                work = Path(tmp) / f"{round_}-{n}"
                work.mkdir(parents=True)
                r = run_case(script, evaluator, args.max_steps, work)
                results[name].append(r)
                print(f"{name}: {r}", file=sys.stderr, flush=True)
    print(f"max_steps {args.max_steps}, {args.repeat} runs each (median; min-max)\n")
    print("| script | evaluator | max_steps reached → launch exited | steps past max_steps "
          "| evaluated step | evaluator restarts (vanished checkpoint) | job |")
    print("|---|---|---|---|---|---|---|")
    for name, runs in results.items():
        kind, ev = name.rsplit(", ", 1)
        after = [r["after_max_steps"] for r in runs if r["after_max_steps"] is not None]
        past = [r["past"] for r in runs]
        evald = [r["evaluated"] for r in runs if r["evaluated"] is not None]
        print(f"| {kind} | {'yes' if ev == 'evaluator' else 'no'} "
              f"| {_fmt(after, 's')} | {_fmt(past, '')} | {_fmt(evald, '') if evald else '-'} "
              f"| {sum(r['restarts'] for r in runs)} in {len(runs)} runs "
              f"| {_fmt([r['duration'] for r in runs], 's')} |")


def _fmt(values: list[float], unit: str) -> str:
    if not values:
        return "-"
    med = statistics.median(values)
    if unit:
        return f"{med:.1f}{unit} ({min(values):.1f}-{max(values):.1f})"
    return f"{med:g} ({min(values):g}-{max(values):g})"


if __name__ == "__main__":
    main()
