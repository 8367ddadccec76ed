"""The docker backend against the local backend, side by side, and the image build times.

On a private engine (tests/infra/docker_engine.py) it measures:
- the image build: the base image (debootstrap tarball, cold unless cached in
  ~/.cache/tfcluster; ``--cold-base`` makes it again), `docker import`, the runtime image
  cold (an engine with no layers), again with nothing changed (cached), and after a change
  of one source file (the last two layers);
- one Estimator job (chief, 2 workers, ps, evaluator; ``--max-steps``) through each backend,
  rounds alternating: start-up (launch invoked to every task started, and to the first
  checkpoint), wall time, teardown (the job's end decided to launch exited: stopping the
  ps, and for docker removing the containers). Medians.

    .venv/bin/python bench/docker_vs_local.py [--rounds 3] [--max-steps 300] [--cold-base]
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

from infra.docker_engine import base_tarball, cache_dir, docker_engine  # noqa: E402

LAUNCH = str(Path(sys.executable).parent / "launch")
IMAGE = "tfcluster:bench"


def timed(fn) -> tuple[float, object]:
    t0 = time.monotonic()
    value = fn()
    return time.monotonic() - t0, value


def build_times(engine, cold_base: bool) -> dict[str, float]:
    out: dict[str, float] = {}
    tarball = cache_dir() / "docker-base-bookworm.tar.gz"
    if cold_base and tarball.exists():
        tarball.unlink()
    out["debootstrap + tar (cached: 0)"], _ = timed(base_tarball)
    out["docker import"], _ = timed(engine.base_image)
    out["build, cold"] = engine.build(IMAGE, base=engine.base_image())
    out["build, nothing changed"] = engine.build(IMAGE, base=engine.base_image())
    marker = REPO / "launcher" / "_bench_touch.py"
    marker.write_text("# a source change for bench/docker_vs_local.py\n")
    try:
        out["build, one source file changed"] = engine.build(IMAGE, base=engine.base_image())
    finally:
        marker.unlink()
    out["build ssh-host stage (runtime cached)"] = engine.build(
        IMAGE + "-ssh", base=engine.base_image(), target="ssh-host")
    return out


def spec_for(backend: str, work: Path, max_steps: int) -> Path:
    shared = work / "shared"
    shared.mkdir(parents=True)
    spec = {"name": f"b{backend}",
            "cluster": {"chief": ["localhost"], "worker": ["localhost", "localhost"],
                        "ps": ["localhost"]},
            "evaluator": "localhost",
            "command": ["python", "examples/estimator/train.py", "--save-steps", "100",
                        "--data-dir", str(work / "data")],
            "model_dir": str(shared / "model"), "max_steps": max_steps, "backend": backend,
            "timeouts": {"kill": 5}}
    if backend == "docker":
        spec["docker"] = {"image": IMAGE, "volumes": [f"{shared}:{shared}", f"{work}:{work}"]}
    else:
        spec["command"][0] = str(REPO / ".venv" / "bin" / "python")
    path = work / "spec.json"
    path.write_text(json.dumps(spec))
    return path


def one_job(backend: str, max_steps: int) -> dict[str, float]:
    with tempfile.TemporaryDirectory(prefix="bench-dk-") as tmp:
        work = Path(tmp)
        spec = spec_for(backend, work, max_steps)
        ckpt = work / "shared" / "model" / "checkpoint"
        t0 = time.time()
        proc = subprocess.Popen([LAUNCH, str(spec), "--quiet", "--run-dir", str(work / "run")],
                                cwd=REPO, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                                text=True)
        first_ckpt = None
        while proc.poll() is None:
            if first_ckpt is None and ckpt.exists():
                first_ckpt = time.time()
            time.sleep(0.05)
        t_end = time.time()
        if proc.returncode != 0:
            raise SystemExit(f"{backend} job failed: {proc.stderr.read()[-2000:]}")
        events = [json.loads(x) for x in (work / "run" / "events.jsonl").read_text().split("\n")
                  if x]
        started = max(e["time"] for e in events if e["event"] == "task_started")
        decided = next(e["time"] for e in events if e["event"] == "job_ended")
        stopping = [e["time"] for e in events if e["event"] == "stopping"]
        end_of_training = min(stopping) if stopping else decided
        return {"tasks started": started - t0,
                "first checkpoint": (first_ckpt or t_end) - t0,
                "wall": t_end - t0,
                "teardown": t_end - end_of_training}


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--max-steps", type=int, default=300)
    p.add_argument("--cold-base", action="store_true",
                   help="make the debootstrap base again (drop the cached tarball)")
    args = p.parse_args()
    with docker_engine() as engine:
        os.environ.update(engine.env())
        print(f"engine: storage driver {engine.driver}")
        for name, seconds in build_times(engine, args.cold_base).items():
            print(f"{name:40s} {seconds:7.1f} s")
        rows: dict[str, list[dict[str, float]]] = {"local": [], "docker": []}
        for _ in range(args.rounds):
            for backend in ("local", "docker"):
                rows[backend].append(one_job(backend, args.max_steps))
        keys = list(rows["local"][0])
        print("\n| measure | local | docker | docker / local |\n|---|---|---|---|")
        for key in keys:
            loc = statistics.median(r[key] for r in rows["local"])
            dk = statistics.median(r[key] for r in rows["docker"])
            print(f"| {key} | {loc:.1f} s | {dk:.1f} s | {dk / loc:.2f} |")
        print(f"\nrounds {args.rounds}, max_steps {args.max_steps}; per round: "
              + json.dumps({b: [{k: round(v, 1) for k, v in r.items()} for r in rs]
                            for b, rs in rows.items()}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
