"""How fast the metrics tools are: the TF-free events reader against TensorFlow's own
summary_iterator, `launch report` end to end, and the exact rank AUC of `launch evaluate`.

    .venv/bin/python bench/metrics_report.py [--scalars 20000 100000] [--auc 100000 1000000]

An events file with N loss scalars (plus as many global_step/sec) is written by TensorFlow
2.15 (the `.venv` Python), then read by both readers; `launch report` draws a run dir whose
model_dir holds it and a metrics file of 100 checkpoints. Prints a table.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
PY_TF215 = str(REPO / ".venv" / "bin" / "python")
LAUNCH = str(REPO / ".venv" / "bin" / "launch")

WRITE = """
import sys, tensorflow as tf
tf.compat.v1.disable_eager_execution()
n = int(sys.argv[2])
with tf.compat.v1.summary.FileWriter(sys.argv[1]) as w:
    for step in range(n):
        s = tf.compat.v1.Summary(value=[
            tf.compat.v1.Summary.Value(tag="loss", simple_value=1.0 / (step + 1)),
            tf.compat.v1.Summary.Value(tag="global_step/sec", simple_value=300.0)])
        w.add_summary(s, step)
"""

READ_TF = """
import glob, sys, time, tensorflow as tf
t = time.perf_counter()
n = 0
for f in glob.glob(sys.argv[1] + "/events.out.tfevents.*"):
    for e in tf.compat.v1.train.summary_iterator(f):
        n += len(e.summary.value)
print(n, time.perf_counter() - t)
"""


def timed(fn, repeat: int = 3) -> tuple[float, object]:
    times, result = [], None
    for _ in range(repeat):
        t = time.perf_counter()
        result = fn()
        times.append(time.perf_counter() - t)
    return statistics.median(times), result


def bench_events(n: int, rows: list) -> None:
    from orchestrator.metrics_file import MetricsRecord, MetricsWriter
    from orchestrator.tfformats import scalars_in_dir

    tmp = Path(tempfile.mkdtemp(prefix="bench-metrics-"))
    model = tmp / "model"
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2")
    subprocess.run([PY_TF215, "-c", WRITE, str(model), str(n)], check=True, env=env)
    size = sum(f.stat().st_size for f in model.glob("events.out.tfevents.*"))
    mine, scalars = timed(lambda: scalars_in_dir(str(model)))
    out = subprocess.run([PY_TF215, "-c", READ_TF, str(model)], check=True, env=env,
                         capture_output=True, text=True).stdout.split()
    theirs_n, theirs = int(out[0]), float(out[1])
    assert len(scalars) == theirs_n == 2 * n, (len(scalars), theirs_n)
    writer = MetricsWriter(str(model))
    for i in range(100):
        writer.append(MetricsRecord(i * n // 100, f"{model}/model.ckpt-{i}", "eval",
                                    {"loss": 1 / (i + 1), "accuracy": 0.5 + i / 250,
                                     "auc": 0.5 + i / 220}, time.time()))
    run_dir = tmp / "run"
    run_dir.mkdir()
    (run_dir / "plan.json").write_text(json.dumps(
        {"run_id": "bench-1", "name": "bench", "model_dir": str(model), "max_steps": n,
         "tasks": []}))
    report, _ = timed(lambda: subprocess.run([LAUNCH, "report", str(run_dir)], check=True,
                                             capture_output=True), repeat=3)
    rows.append((f"events: {2 * n} scalars, {size / 1e6:.1f} MB",
                 f"{mine * 1000:.0f} ms", f"{theirs * 1000:.0f} ms", f"{report:.2f} s"))


def bench_auc(n: int) -> tuple[str, str]:
    from orchestrator.binary_metrics import binary_metrics

    rng = random.Random(1)
    labels = [rng.random() < 0.3 for _ in range(n)]
    scores = [min(1.0, max(0.0, rng.gauss(0.6 if y else 0.4, 0.2))) for y in labels]
    seconds, _ = timed(lambda: binary_metrics(labels, scores), repeat=3)
    return f"binary_metrics (AUC+acc+logloss), {n} examples", f"{seconds:.2f} s"


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--scalars", type=int, nargs="*", default=[20000, 100000])
    p.add_argument("--auc", type=int, nargs="*", default=[100000, 1000000])
    a = p.parse_args()
    sys.path.insert(0, str(REPO))
    rows: list = []
    for n in a.scalars:
        bench_events(n, rows)
    print("| case | orchestrator.tfformats | TF summary_iterator | launch report |")
    print("|---|---|---|---|")
    for r in rows:
        print("| " + " | ".join(r) + " |")
    print("\n| case | time |\n|---|---|")
    for n in a.auc:
        print("| " + " | ".join(bench_auc(n)) + " |")


if __name__ == "__main__":
    main()
