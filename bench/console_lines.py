"""How many lines `launch` prints off a terminal (stdout and stderr together), for the example
jobs and one third-party script of each kind, with the launcher of a given tree.

    .venv/bin/python bench/console_lines.py [--tree PATH] [--jobs NAME ...]

``--tree`` is the repository whose launcher runs (default: this one), e.g. a checkout of
an older commit made with ``git archive COMMIT | tar -x -C DIR`` (with the two virtual
environments linked into it): the same jobs, the same scripts (this tree's tests/thirdparty
and examples), the launcher before and after. One row per job: exit status, console lines,
task lines shown, the launcher's own lines.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
TF215 = str(REPO / ".venv" / "bin" / "python")
TF221 = str(REPO / ".venv-tf2" / "bin" / "python")
THIRDPARTY = REPO / "tests" / "thirdparty"


def example(name: str, python: str) -> dict:
    spec = json.loads((REPO / "cluster_specs" / f"{name}.json").read_text())
    spec["command"] = [python, str(REPO / "examples" / name / "train.py")]
    return spec


def sh(python: str, script: str, *args: str) -> list[str]:
    return ["sh", "-c", f"exec {python} {THIRDPARTY / script} {' '.join(args)}"]


JOBS = {
    "estimator": lambda: example("estimator", TF215),
    "pss": lambda: example("pss", TF221),
    "mwms": lambda: example("mwms", TF221),
    # 300 steps, keep_checkpoint_max 5, a checkpoint every 20 steps, TensorFlow's evaluator:
    # the evaluator may read a checkpoint deleted under it (the launcher restarts it)
    "stock-estimator-300": lambda: {
        "cluster": {"chief": 1}, "evaluator": "localhost", "max_steps": 300,
        "command": sh(TF215, "stock_estimator.py", '--model_dir="$TFCLUSTER_MODEL_DIR"',
                      '--max_steps="$TFCLUSTER_MAX_STEPS"')},
    "tf1-howto": lambda: {
        "cluster": {"chief": 1, "worker": 1, "ps": 1}, "max_steps": 4000,
        "command": sh(TF215, "tf1_distributed_howto.py",
                      '--checkpoint_dir="$TFCLUSTER_MODEL_DIR"',
                      '--last_step="$TFCLUSTER_MAX_STEPS"')},
    "keras-mwms-tutorial": lambda: {       # the tutorial's cluster: workers only
        "cluster": {"worker": 2}, "strategy": "multi_worker_mirrored",
        "command": sh(TF221, "keras_mwms_tutorial.py")},
    "estimator-mwms-tutorial": lambda: {
        "cluster": {"chief": 1, "worker": 1}, "strategy": "multi_worker_mirrored",
        "tf_config_model_dir": False, "env": {"ROWS": "16384"},
        "command": sh(TF215, "multiworker_estimator_tutorial.py")},
}


def run(tree: Path, name: str, tmp: Path) -> dict:
    spec = {"name": name, "backend": "local", **JOBS[name](), "model_dir": str(tmp / "model"),
            "timeouts": {"start": 300}}      # a loaded machine starts TensorFlow slowly
    (tmp / "spec.json").write_text(json.dumps(spec))
    env = {**os.environ, "PYTHONPATH": str(tree),
           "TFCLUSTER_EXAMPLES_DATA": str(Path(tempfile.gettempdir()) / "tfcluster-data")}
    # the tree's launcher first on sys.path (`python -c` puts the working directory there),
    # run from the job's folder: the run registry (.tfcluster/) goes there, not into a tree
    launch = (f"import sys; sys.path.insert(0, {str(tree)!r}); "
              f"from launcher.cli import main; sys.exit(main())")
    proc = subprocess.run([sys.executable, "-c", launch,
                           str(tmp / "spec.json"), "--run-dir", str(tmp / "run")],
                          cwd=tmp, env=env, stdin=subprocess.DEVNULL,
                          stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    (tmp.parent / f"{name}.console.txt").write_text(proc.stdout)
    lines = proc.stdout.splitlines()
    own = sum(1 for line in lines if line.startswith("tfcluster:"))
    return {"job": name, "exit": proc.returncode, "lines": len(lines),
            "task lines": sum(1 for line in lines if line.startswith("[")), "launcher": own}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tree", type=Path, default=REPO)
    parser.add_argument("--jobs", nargs="*", default=list(JOBS), choices=list(JOBS))
    parser.add_argument("--keep", type=Path, help="keep each job's console here")
    args = parser.parse_args()
    print("| job | exit | console lines | task lines | launcher lines |")
    print("|---|---|---|---|---|")
    for name in args.jobs:
        with tempfile.TemporaryDirectory() as tmp:
            keep = args.keep or Path(tmp)
            keep.mkdir(parents=True, exist_ok=True)
            job_tmp = keep / name
            job_tmp.mkdir(exist_ok=True)
            row = run(args.tree.resolve(), name, job_tmp)
        print(f"| {row['job']} | {row['exit']} | {row['lines']} | {row['task lines']} | "
              f"{row['launcher']} |", flush=True)


if __name__ == "__main__":
    main()
