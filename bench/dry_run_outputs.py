"""Every spec's dry runs, written down with ports and run ids masked, to compare two trees.

A refactor must not change what a user sees: `--dry-run`, `--dry-run --json` and
`--detach --dry-run` of every spec in cluster_specs/ and docker/, and of variants of the
estimator spec that reach the other code paths (ssh, slurm, docker, kubernetes, keras,
tracking, roles, resources, timeouts).

    PYTHONPATH=$PWD .venv/bin/python bench/dry_run_outputs.py OUT_DIR
    diff -r BEFORE_DIR AFTER_DIR            # nothing: the same output

Each output is OUT_DIR/<spec>.<mode>.txt, with its exit status on the first line.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
MODES = {"dry": ["--dry-run"], "json": ["--dry-run", "--json"],
         "detach": ["--detach", "--dry-run"]}


def _variants() -> dict[str, dict]:
    """Specs derived from cluster_specs/estimator.json, one per code path worth seeing."""
    base = json.loads((ROOT / "cluster_specs" / "estimator.json").read_text())
    base["model_dir"] = str(ROOT / "runs" / "dry-run" / "model")
    base["command"] = ["python", str(ROOT / "examples" / "estimator" / "train.py")]
    hosts = {"chief": ["h1:2222"], "worker": ["h2:2222", "h2:2223"], "ps": ["h1:2223"]}

    def v(**changes: object) -> dict:
        return {**base, **changes}

    return {
        "v-ssh": v(backend="ssh", cluster=hosts, evaluator="h2:2224",
                   ssh={"user": "tf", "connect_timeout": 3}),
        "v-ssh-sync": v(backend="ssh", cluster=hosts, evaluator=None,
                        ssh={"sync": True}, workdir=str(ROOT)),
        "v-slurm": v(backend="slurm", cluster={"chief": 1, "worker": 2, "ps": 1},
                     evaluator=None, slurm={"partition": "debug"},
                     resources={"default": {"cpus": 2, "memory": "1G"}}),
        "v-docker": v(backend="docker", cluster={"chief": 1, "worker": 1, "ps": 1},
                      evaluator=None, docker={"image": "tfcluster:dev"}),
        "v-kubernetes": v(backend="kubernetes", cluster={"chief": 1, "worker": 2, "ps": 1},
                          evaluator=None, model_dir="s3://bucket/model",
                          kubernetes={"image": "tfcluster:dev"}),
        "v-roles": v(roles={"worker": {"env": {"A": "$(TFCLUSTER_TASK_INDEX)"}},
                            "ps": {"command": ["python", "-c", "print(1)"]}},
                     env={"SECRET_TOKEN": "hunter2", "B": "1"},
                     timeouts={"start": 30, "kill": 2, "preempt": 10, "save": 40}),
        "v-keras-tfkeras": v(keras="tf-keras", cluster={"chief": 1, "worker": 1},
                             evaluator=None, strategy="multi_worker_mirrored",
                             epochs=None, examples=None, batch_size=None, max_steps=50),
        "v-keras-jax": v(keras="jax", cluster={"chief": 1, "worker": 1}, evaluator=None,
                         strategy="multi_worker_mirrored", epochs=None, examples=None,
                         batch_size=None, max_steps=50),
        "v-tracking": v(tracking={"mlflow": {"tracking_uri": "http://127.0.0.1:5999",
                                             "experiment": "dry"}}),
        "v-bad-timeout": v(timeouts={"kil": 1}),
        "v-bad-resources": v(resources={"worker": {"cpus": "two"}}),
        "v-pss-gpus": v(strategy="parameter_server", max_steps=100, epochs=None,
                        examples=None, batch_size=None, resources={"worker": {"gpus": 0}}),
    }


def _clean(spec: dict) -> dict:
    return {k: val for k, val in spec.items() if val is not None or k == "evaluator"}


def _mask(text: str, roots: list[str]) -> str:
    for root in roots:
        text = text.replace(root, "ROOT")
    text = re.sub(r"-[0-9a-f]{8}\b", "-RUNID", text)
    text = re.sub(r"(?<=[:=\"' ])[1-6]\d{4}\b", "PORT", text)
    return re.sub(r"\b\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d[.\d]*\S*", "TIME", text)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out", type=Path)
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    specs = {p.stem: p for p in sorted((ROOT / "cluster_specs").glob("*.json"))
             if "schema" not in p.name}
    specs["docker-cluster"] = ROOT / "docker" / "cluster.json"
    with tempfile.TemporaryDirectory(prefix="dryrun-") as tmp:
        for name, spec in _variants().items():
            path = Path(tmp) / f"{name}.json"
            path.write_text(json.dumps(_clean(spec), indent=1))
            specs[name] = path
        env = {**os.environ, "PYTHONPATH": str(ROOT), "TFCLUSTER_RUNS": f"{tmp}/runs"}
        env.pop("MLFLOW_TRACKING_URI", None)
        for name, path in specs.items():
            for mode, flags in MODES.items():
                proc = subprocess.run([sys.executable, "-m", "launcher.cli", *flags, str(path)],
                                      cwd=ROOT, env=env, capture_output=True, text=True,
                                      stdin=subprocess.DEVNULL, timeout=120)
                text = f"exit {proc.returncode}\n{proc.stdout}{proc.stderr}"
                masked = _mask(text, [tmp, os.path.realpath(tmp), str(ROOT)])
                (args.out / f"{name}.{mode}.txt").write_text(masked)
    print(f"{len(specs) * len(MODES)} outputs in {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
