"""TensorFlow's own parsers accept the TF_CONFIG that `launch` gives every task and see the
task, the chief and the ps and worker counts the spec says (TF 2.15 RunConfig, TF 2.21
TFConfigClusterResolver)."""

from __future__ import annotations

import json
import subprocess

import pytest
from support import PY_TF215, PY_TF221, run_launch

pytestmark = pytest.mark.tf

RUNCONFIG_PROBE = r"""
import json, os, sys
import tensorflow as tf
out = []
for task in json.load(sys.stdin)["tasks"]:
    os.environ["TF_CONFIG"] = task["env"]["TF_CONFIG"]
    rc = tf.estimator.RunConfig()
    name = task.get("plan", "") + f"{task['type']}:{task['index']}"
    out.append({"name": name, "task_type": rc.task_type,
                "task_id": rc.task_id, "is_chief": rc.is_chief,
                "num_ps": rc.num_ps_replicas, "num_workers": rc.num_worker_replicas,
                "master": rc.master, "jobs": sorted(rc.cluster_spec.jobs)})
print(json.dumps(out))
"""

RESOLVER_PROBE = r"""
import json, os, sys
import tensorflow as tf
from tensorflow.python.distribute import multi_worker_util
out = []
for task in json.load(sys.stdin)["tasks"]:
    os.environ["TF_CONFIG"] = task["env"]["TF_CONFIG"]
    r = tf.distribute.cluster_resolver.TFConfigClusterResolver()
    spec = r.cluster_spec()
    multi_worker_util.normalize_cluster_spec(spec)
    jobs = spec.as_dict()
    is_chief = (multi_worker_util.is_chief(spec, r.task_type, r.task_id)
                if r.task_type != "evaluator" else False)
    name = task.get("plan", "") + f"{task['type']}:{task['index']}"
    out.append({"name": name, "task_type": r.task_type,
                "task_id": r.task_id, "is_chief": is_chief,
                "num_ps": len(jobs.get("ps", [])), "num_workers": len(jobs.get("worker", [])),
                "jobs": sorted(jobs), "rpc_layer": r.rpc_layer})
print(json.dumps(out))
"""


def dry_run(spec_path) -> dict:
    done = run_launch(str(spec_path), "--dry-run", "--json")
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


def probe(python: str, script: str, plans: dict[str, dict]) -> dict[str, dict[str, dict]]:
    """What one TensorFlow process (``script``) sees in every task of several plans:
    {plan's label: {"type:index": row}}."""
    tasks = [dict(task, plan=f"{label}/") for label, plan in plans.items()
             for task in plan["tasks"]]
    done = subprocess.run([python, "-c", script], input=json.dumps({"tasks": tasks}),
                          text=True, capture_output=True, timeout=120)
    assert done.returncode == 0, done.stderr[-3000:]
    seen: dict[str, dict[str, dict]] = {label: {} for label in plans}
    for row in json.loads(done.stdout.strip().splitlines()[-1]):
        label, _, name = row["name"].partition("/")
        seen[label][name] = row
    return seen


ESTIMATOR = {"cluster": {"chief": ["localhost"], "worker": 2, "ps": ["localhost", "localhost"]},
             "evaluator": "localhost", "command": ["python", "train.py"], "model_dir": "model",
             "max_steps": 10}
LEGACY_MASTER = {"cluster": {"master": 1, "worker": 1, "ps": 1}, "command": ["python", "t.py"],
                 "model_dir": "m"}


def plan_of(tmp_path, spec: dict) -> dict:
    path = tmp_path / "cluster.json"
    path.write_text(json.dumps(spec))
    return dry_run(path)


@pytest.fixture(scope="module")
def runconfig_seen(tmp_path_factory) -> dict[str, dict[str, dict]]:
    """TF 2.15's RunConfig in every task of both specs, one TensorFlow process for both."""
    plans = {"estimator": plan_of(tmp_path_factory.mktemp("estimator"), ESTIMATOR),
             "master": plan_of(tmp_path_factory.mktemp("master"), LEGACY_MASTER)}
    return probe(PY_TF215, RUNCONFIG_PROBE, plans)


def test_runconfig_tf215_sees_the_spec(runconfig_seen):
    seen = runconfig_seen["estimator"]
    assert seen["chief:0"]["is_chief"] and seen["chief:0"]["task_type"] == "chief"
    assert not seen["worker:1"]["is_chief"]
    assert (seen["worker:1"]["task_type"], seen["worker:1"]["task_id"]) == ("worker", 1)
    for name in ("chief:0", "worker:0", "worker:1"):
        # RunConfig counts the chief among the workers.
        assert (seen[name]["num_ps"], seen[name]["num_workers"]) == (2, 3)
        assert seen[name]["master"].startswith("grpc://localhost:")
    assert seen["evaluator:0"]["task_type"] == "evaluator"
    assert seen["evaluator:0"]["num_workers"] == 0  # the evaluator stands outside the cluster
    assert seen["ps:1"]["task_type"] == "ps" and seen["ps:1"]["task_id"] == 1


def test_cluster_resolver_tf221_sees_the_spec(tmp_path):
    seen = probe(PY_TF221, RESOLVER_PROBE, {"estimator": plan_of(tmp_path, ESTIMATOR)})
    seen = seen["estimator"]
    assert seen["chief:0"]["is_chief"] and not seen["worker:0"]["is_chief"]
    for row in seen.values():
        assert (row["num_ps"], row["num_workers"]) == (2, 2)
        assert row["jobs"] == ["chief", "ps", "worker"]
    assert (seen["worker:1"]["task_type"], seen["worker:1"]["task_id"]) == ("worker", 1)
    assert seen["evaluator:0"]["task_type"] == "evaluator"


def test_legacy_master_runconfig(runconfig_seen):
    seen = runconfig_seen["master"]
    assert seen["master:0"]["is_chief"] and seen["master:0"]["task_type"] == "master"
    assert seen["master:0"]["jobs"] == ["master", "ps", "worker"]
