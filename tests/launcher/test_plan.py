"""The job plan: TF_CONFIG, shard variables and environment for every task."""

from __future__ import annotations

import itertools
import json

from launcher.api import parse_spec
from launcher.checks import Address
from launcher.plan import build_plan, reservation


def plan_of(doc: dict, **kwargs):
    ports = itertools.count(40000)
    return build_plan(parse_spec(json.dumps(doc)), port_for=lambda host: next(ports), **kwargs)


BASE = {"cluster": {"chief": 1, "worker": 2, "ps": ["localhost:2223"]},
        "evaluator": "localhost", "command": ["python", "t.py"], "model_dir": "m",
        "max_steps": 100}


def test_every_task_gets_its_own_tf_config():
    plan = plan_of(BASE)
    assert [t.name for t in plan.tasks] == ["ps:0", "chief:0", "worker:0", "worker:1",
                                            "evaluator:0"]
    configs = {t.name: json.loads(t.env["TF_CONFIG"]) for t in plan.tasks}
    cluster = configs["chief:0"]["cluster"]
    assert cluster["ps"] == ["localhost:2223"]
    assert len(cluster["worker"]) == 2 and "evaluator" not in cluster
    assert configs["worker:1"]["task"] == {"type": "worker", "index": 1}
    assert configs["evaluator:0"]["task"] == {"type": "evaluator", "index": 0}
    assert all(c["cluster"] == cluster for c in configs.values())
    ports = [t.port for t in plan.tasks]
    assert len(set(ports)) == len(ports)


def test_shards_chief_first_then_workers():
    plan = plan_of(BASE)
    shards = {t.name: (t.env.get("TFCLUSTER_SHARD_INDEX"), t.env.get("TFCLUSTER_NUM_SHARDS"))
              for t in plan.tasks}
    assert shards == {"ps:0": (None, None), "chief:0": ("0", "3"), "worker:0": ("1", "3"),
                      "worker:1": ("2", "3"), "evaluator:0": (None, None)}


def test_run_environment():
    plan = plan_of({**BASE, "env": {"FOO": "bar baz"}}, run_id="r1")
    env = plan.task("worker", 1).env
    assert env["TFCLUSTER_RUN_ID"] == "r1"
    assert env["TFCLUSTER_MODEL_DIR"] == "m"
    assert env["TFCLUSTER_MAX_STEPS"] == "100"
    assert env["FOO"] == "bar baz"


def test_max_steps_derived_from_epochs_counts_each_example_epochs_times():
    doc = {**BASE, "epochs": 2, "examples": 1000, "batch_size": 100}
    del doc["max_steps"]
    plan = plan_of(doc)
    # 3 trainers, shards of 334/333/333 examples, 2 epochs each, batches of 100:
    # ceil(668/100) + ceil(666/100) * 2 = 7 + 7 + 7, not 3 x 20.
    assert plan.max_steps == 21
    assert plan.task("chief").env["TFCLUSTER_MAX_STEPS"] == "21"


def test_no_max_steps_means_no_variable():
    doc = dict(BASE)
    del doc["max_steps"]
    assert "TFCLUSTER_MAX_STEPS" not in plan_of(doc).task("chief").env


def test_legacy_master_is_kept_as_master():
    plan = plan_of({"cluster": {"master": 1, "worker": 1}, "command": ["x"], "model_dir": "m"})
    assert json.loads(plan.task("master").env["TF_CONFIG"])["cluster"].keys() == {"master",
                                                                                  "worker"}


def test_local_mapping_rewrites_hosts():
    plan = plan_of({**BASE, "cluster": {"chief": ["h1"], "ps": ["h2:2222"]}},
                   place=lambda role, index, a: Address("localhost", a.port))
    assert {t.host for t in plan.tasks} == {"localhost"}
    assert plan.task("ps").port == 2222


def test_the_reservation_is_every_task_at_its_spec_address_in_the_specs_order():
    r = reservation(parse_spec(json.dumps(BASE)))
    assert [(role, i) for role, i, _ in r.tasks] == [("chief", 0), ("worker", 0), ("worker", 1),
                                                      ("ps", 0), ("evaluator", 0)]
    assert r.tasks[3][2] == Address("localhost", 2223)
    assert r.roles == {"chief": 1, "worker": 2, "ps": 1, "evaluator": 1}


def test_parameter_server_strategy_shards_over_the_workers_only():
    doc = {**BASE, "strategy": "parameter_server", "epochs": 1, "examples": 1000,
           "batch_size": 100}
    del doc["max_steps"]
    plan = plan_of(doc)
    assert plan.max_steps == 10  # 2 workers x 5 batches; the coordinating chief reads nothing
    assert "TFCLUSTER_SHARD_INDEX" not in plan.task("chief").env
    assert plan.task("worker", 1).env["TFCLUSTER_NUM_SHARDS"] == "2"
    assert [plan.task("worker", i).env["TFCLUSTER_SHARD_INDEX"] for i in (0, 1)] == ["0", "1"]


def test_without_ps_several_trainers_train_synchronously():
    doc = {"cluster": {"chief": 1, "worker": 1}, "command": ["x"], "model_dir": "m",
           "epochs": 1, "examples": 1000, "batch_size": 100}
    plan = plan_of(doc)
    assert plan.max_steps == 5  # one global step is a batch on both trainers


def test_estimator_tasks_find_model_dir_in_tf_config():
    """tf.estimator.RunConfig takes TF_CONFIG["model_dir"] when the script gives none: the
    very same string as the spec's (TFCLUSTER_MODEL_DIR), for every task."""
    plan = plan_of(BASE)
    for task in plan.tasks:
        assert json.loads(task.env["TF_CONFIG"])["model_dir"] == "m"
        assert task.env["TFCLUSTER_MODEL_DIR"] == "m"


def test_model_dir_in_tf_config_can_be_turned_off():
    plan = plan_of({**BASE, "tf_config_model_dir": False})
    assert all("model_dir" not in json.loads(t.env["TF_CONFIG"]) for t in plan.tasks)


def test_keras_strategies_get_no_model_dir_in_tf_config():
    mwms = plan_of({**BASE, "cluster": {"chief": 1, "worker": 1}, "evaluator": None})
    pss = plan_of({**BASE, "strategy": "parameter_server"})
    for plan in (mwms, pss):
        assert all("model_dir" not in json.loads(t.env["TF_CONFIG"]) for t in plan.tasks)
