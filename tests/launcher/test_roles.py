"""Per-role settings, the task-identity variables and $(VAR) expansion in the plan."""

from __future__ import annotations

import itertools
import json

import pytest

from launcher.api import parse_spec
from launcher.expand import expand
from launcher.plan import build_plan

TF1 = ["python", "train.py", "--job_name=$(TFCLUSTER_TASK_TYPE)",
       "--task_index=$(TFCLUSTER_TASK_INDEX)", "--ps_hosts=$(TFCLUSTER_PS_HOSTS)",
       "--worker_hosts=$(TFCLUSTER_WORKER_HOSTS)"]


def plan_of(doc: dict, **kwargs):
    ports = itertools.count(40000)
    return build_plan(parse_spec(json.dumps(doc)), port_for=lambda host: next(ports), **kwargs)


@pytest.mark.parametrize("text, expected", [
    ("$(A)", "1"),
    ("x$(A)y$(B)z", "x1y two z"),
    ("$$(A)", "$(A)"),                 # escaped: a literal $(
    ("$$$(A)", "$1"),
    ("$$", "$"),
    ("$(NOPE)", "$(NOPE)"),            # unknown: left as written
    ("$(A", "$(A"),                    # unclosed
    ("$A ${A} $", "$A ${A} $"),        # only $(...) is a reference
    ("$()", "$()"),
    ("$(a$(A)", "$(a$(A)"),            # the name runs to the first ')'
])
def test_expansion_follows_kubernetes(text, expected):
    assert expand(text, {"A": "1", "B": " two "}) == expected


def test_every_task_knows_its_role_index_and_hosts():
    plan = plan_of({"cluster": {"chief": 1, "worker": 2, "ps": ["localhost:2223"]},
                    "evaluator": "localhost", "command": ["python", "t.py"],
                    "model_dir": "m"})
    for task in plan.tasks:
        cluster = json.loads(task.env["TF_CONFIG"])["cluster"]
        assert task.env["TFCLUSTER_TASK_TYPE"] == task.type
        assert task.env["TFCLUSTER_TASK_INDEX"] == str(task.index)
        for job, addrs in cluster.items():
            assert task.env[f"TFCLUSTER_{job.upper()}_HOSTS"] == ",".join(addrs)
        assert "TFCLUSTER_EVALUATOR_HOSTS" not in task.env
    assert plan.task("ps").env["TFCLUSTER_PS_HOSTS"] == "localhost:2223"
    assert plan.task("chief").env["TFCLUSTER_WORKER_HOSTS"] == "localhost:40001,localhost:40002"


def test_tf1_flags_expand_per_task():
    plan = plan_of({"cluster": {"worker": 2, "ps": 1}, "command": TF1, "model_dir": "m"})
    w1 = plan.task("worker", 1)
    assert w1.command == ["python", "train.py", "--job_name=worker", "--task_index=1",
                          "--ps_hosts=localhost:40000",
                          "--worker_hosts=localhost:40001,localhost:40002"]
    assert w1.raw_command == TF1
    assert plan.task("ps").command[2:4] == ["--job_name=ps", "--task_index=0"]


def test_role_overrides_command_env_and_workdir():
    plan = plan_of({"cluster": {"chief": 1, "worker": 1, "ps": 2},
                    "command": ["python", "t.py"], "env": {"A": "top", "B": "top"},
                    "workdir": "/top", "model_dir": "m",
                    "roles": {"ps": {"command": ["python", "ps.py", "$(TFCLUSTER_TASK)"],
                                     "env": {"B": "ps"}, "workdir": "/ps"}}})
    ps1, chief = plan.task("ps", 1), plan.task("chief")
    assert ps1.command == ["python", "ps.py", "ps:1"] and ps1.cwd == "/ps"
    assert (ps1.env["A"], ps1.env["B"]) == ("top", "ps")
    assert chief.command == ["python", "t.py"] and chief.cwd == "/top"
    assert chief.env["B"] == "top" and chief.raw_command is None


def test_command_after_dashes_replaces_the_top_level_command_not_a_roles_own():
    plan = plan_of({"cluster": {"chief": 1, "ps": 1}, "command": ["python", "t.py"],
                    "model_dir": "m", "roles": {"ps": {"command": ["python", "ps.py"]}}},
                   command=["python", "other.py"])
    assert plan.task("chief").command == ["python", "other.py"]
    assert plan.task("ps").command == ["python", "ps.py"]


def test_tony_style_variables_from_env_values():
    plan = plan_of({"cluster": {"worker": 2}, "command": ["python", "t.py"], "model_dir": "m",
                    "env": {"JOB_NAME": "$(TFCLUSTER_TASK_TYPE)",
                            "TASK_INDEX": "$(TFCLUSTER_TASK_INDEX)", "KEEP": "$$(X)"}})
    w1 = plan.task("worker", 1)
    assert (w1.env["JOB_NAME"], w1.env["TASK_INDEX"], w1.env["KEEP"]) == ("worker", "1", "$(X)")


def test_role_without_tasks_is_refused():
    from launcher.errors import SpecError

    with pytest.raises(SpecError, match=r"roles.ps: the spec has no ps task"):
        parse_spec(json.dumps({"cluster": {"worker": 1}, "model_dir": "m",
                               "roles": {"ps": {"command": ["x"]}}}))


def test_dry_run_says_which_ports_are_picked_again_at_start():
    import launcher

    doc = {"cluster": {"chief": 1, "ps": ["localhost:2299"]}, "command": ["python", "t.py"],
           "model_dir": "m"}
    lines = launcher.dry_run(doc).splitlines()
    assert "# ports marked 'auto' were picked now and are picked again at start: give " \
           "host:port in the spec to fix them" in lines
    assert "ps:0  localhost:2299" in lines                      # given in the spec: kept
    assert any(line.startswith("chief:0  localhost:") and line.endswith("  (auto)")
               for line in lines)
    k8s = launcher.dry_run({**doc, "cluster": {"chief": 1}, "backend": "kubernetes",
                            "kubernetes": {"image": "img"}})
    assert "(auto)" not in k8s and "picked again" not in k8s    # every pod uses one port
