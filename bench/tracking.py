"""Tracking's cost (docs/tracking.md, docs/benchmarks.md): `launch` with MLflow tracking on
against off, side by side on a real `mlflow server` (tests/infra/mlflow_server.py), in
alternating rounds so both see the same load; medians.

- start: from invoking `launch SPEC` to the first task running (a one-task job whose task
  writes the time it started), and `launch SPEC --dry-run`'s whole wall time;
- cpu: the launcher process's own CPU seconds (user + sys, its tasks left out) over a
  1,000-step job: a stand-in chief without TensorFlow (this file, run as the task) that
  appends a loss to an events file every step, 100 steps/s, saves a checkpoint and writes
  an evaluation into tfcluster_metrics.jsonl every 100 steps, and exits at step 1,000.

    .venv/bin/python bench/tracking.py [--rounds 5] [--screenshot docs/images/mlflow_run.png]

``--screenshot``: once the rounds are done, MLflow's UI page of the last tracked run, drawn
by headless Chromium (tests/headless_chromium.py).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import struct
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "tests"))
LAUNCH = str(Path(sys.executable).parent / "launch")
STEPS, EVAL_EVERY, PACE = 1000, 100, 0.01


# ---------------------------------------------------------------- the stand-in chief
def scalar_record(step: int, tag: str, value: float) -> bytes:
    from coordinator.tf_writes import _varint, tfrecord

    name = tag.encode()
    value_msg = b"\x0a" + _varint(len(name)) + name + b"\x15" + struct.pack("<f", value)
    return tfrecord(step, b"\x0a" + _varint(len(value_msg)) + value_msg)


def chief() -> None:
    """1,000 steps: a loss per step, a checkpoint and an evaluation every 100."""
    import fsspec
    from coordinator.tf_writes import FakeTrainer

    from orchestrator.metrics_file import MetricsRecord, MetricsWriter

    model_dir = os.environ["TFCLUSTER_MODEL_DIR"]
    trainer = FakeTrainer(fsspec.filesystem("file"), model_dir)
    metrics = MetricsWriter(model_dir)
    events = Path(model_dir) / "events.out.tfevents.1.bench"
    with open(events, "ab") as f:
        for step in range(1, STEPS + 1):
            f.write(scalar_record(step, "loss", 1.0 / step))
            f.flush()
            if step % EVAL_EVERY == 0:
                trainer.save(step)
                metrics.append(MetricsRecord(step, f"{model_dir}/model.ckpt-{step}", "eval",
                                             {"auc": 1 - 1.0 / step}, time.time()))
            time.sleep(PACE)


# ---------------------------------------------------------------- the rounds
def spec(work: Path, name: str, command: list[str], url: str | None) -> Path:
    doc = {"name": name, "cluster": {"chief": 1}, "command": command,
           "model_dir": str(work / "model"), "run_dir": str(work / "runs"),
           "max_steps": STEPS}
    if url:
        doc["tracking"] = {"mlflow": {"tracking_uri": url, "experiment": "bench"}}
    path = work / "spec.json"
    path.write_text(json.dumps(doc))
    return path


def env() -> dict[str, str]:
    return {**{k: v for k, v in os.environ.items() if not k.startswith("MLFLOW_")},
            "PYTHONPATH": str(REPO)}


def first_task(work: Path, url: str | None) -> tuple[float, float]:
    """(seconds to the first task running, seconds of a --dry-run)."""
    stamp = work / "started"
    path = spec(work, "start", [sys.executable, "-c", "import time,sys; open(sys.argv[1], 'w')"
                                ".write(repr(time.time()))", str(stamp)], url)
    t0 = time.time()
    subprocess.run([LAUNCH, str(path), "--quiet"], check=True, env=env(),
                   stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                   stderr=subprocess.DEVNULL)
    started = float(stamp.read_text()) - t0
    t0 = time.perf_counter()
    subprocess.run([LAUNCH, str(path), "--dry-run"], check=True, env=env(),
                   stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL)
    return started, time.perf_counter() - t0


def launcher_cpu(work: Path, url: str | None) -> tuple[float, float]:
    """(the launcher's own CPU seconds, wall seconds) over the 1,000-step job."""
    import psutil

    path = spec(work, "cpu", [sys.executable, __file__, "--chief"], url)
    t0 = time.perf_counter()
    proc = subprocess.Popen([LAUNCH, str(path), "--quiet"], env=env(),
                            stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL)
    me, cpu = psutil.Process(proc.pid), 0.0
    while proc.poll() is None:
        try:
            times = me.cpu_times()
            cpu = times.user + times.system
        except psutil.NoSuchProcess:
            break
        time.sleep(0.05)
    assert proc.wait() == 0, "the 1,000-step job failed"
    return cpu, time.perf_counter() - t0


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--screenshot", type=Path)
    p.add_argument("--chief", action="store_true", help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.chief:
        chief()
        return
    from infra.mlflow_server import start_mlflow

    top = Path(tempfile.mkdtemp(prefix="tfc-bench-tracking-"))
    server = start_mlflow(top / "server")
    rows: dict[str, list[float]] = {}
    last_run = None
    try:
        for n in range(-1, args.rounds):       # round -1: a warm-up (bytecode, caches)
            for label, url in (("off", None), ("on", server.url)):
                work = top / f"{label}-{n}"
                for part in ("start", "cpu"):
                    (work / part).mkdir(parents=True)
                started, dry = first_task(work / "start", url)
                cpu, wall = launcher_cpu(work / "cpu", url)
                for key, value in (("first task", started), ("dry-run", dry),
                                   ("launcher cpu", cpu), ("1,000-step job wall", wall)):
                    if n >= 0:
                        rows.setdefault(f"{key} {label}", []).append(value)
                if url:
                    last_run = work / "cpu" / "runs"
        print(f"rounds: {args.rounds} (tracking off and on alternating), medians in seconds")
        for key in ("first task", "dry-run", "launcher cpu", "1,000-step job wall"):
            off, on = (statistics.median(rows[f"{key} {x}"]) for x in ("off", "on"))
            print(f"  {key:<20} off {off:7.3f}  on {on:7.3f}  on-off {on - off:+.3f}")
        if args.screenshot and last_run is not None:
            (run_dir,) = last_run.iterdir()
            state = json.loads((run_dir / "state.json").read_text())
            shoot(state["tracking"]["mlflow"]["url"], args.screenshot)
    finally:
        server.stop()


def shoot(url: str, path: Path) -> None:
    from headless_chromium import screenshot

    path.parent.mkdir(parents=True, exist_ok=True)
    screenshot(url, path, size="1400,1500", budget_ms=15000, timeout=180)
    print(f"screenshot of {url}: {path}")


if __name__ == "__main__":
    main()
