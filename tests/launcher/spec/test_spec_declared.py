"""Each spec key declared once, typed: ``Timeouts``, ``Resources`` and ``Spec``'s fields
carry their schema, default and description; the JSON Schema, the parser's checks and
defaults, the plan's typed values and the tasks' side all read that one declaration."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest

from launcher.api import parse_spec
from launcher.errors import SpecError
from launcher.plan import NoticeRoute, build_plan
from launcher.spec import (
    TIMEOUT_DEFAULTS,
    TOP_LEVEL_KEYS,
    Resources,
    Spec,
    Timeouts,
    resources_for,
)
from launcher.spec.declared import declared, properties
from launcher.spec.sections import RestartSettings
from orchestrator import preemption
from orchestrator.policies import RestartPolicy

REPO = Path(__file__).resolve().parents[3]
SCHEMA = json.loads((REPO / "cluster_specs" / "schema.json").read_text())
BASE = {"cluster": {"chief": 1, "worker": 2, "ps": 1}, "model_dir": "m",
        "command": ["python", "t.py"]}


def spec_of(**keys: object) -> Spec:
    return parse_spec(json.dumps({**BASE, **keys}))


def plan_of(spec: Spec):
    ports = iter(range(20000, 20100))
    return build_plan(spec, lambda host: next(ports), run_id="r", notice=NoticeRoute())


def test_the_timeouts_a_spec_leaves_out_are_the_declared_defaults():
    spec = spec_of(timeouts={"kill": 2, "poll": 0.5})
    assert (spec.timeouts.kill, spec.timeouts.poll) == (2.0, 0.5)
    schema = SCHEMA["properties"]["timeouts"]["properties"]
    for name in ("start", "stall", "finish", "save", "evaluator", "job", "unresponsive",
                 "preempt"):
        assert getattr(spec.timeouts, name) == TIMEOUT_DEFAULTS[name] == \
            schema[name]["default"], name
    assert list(schema) == [f.name for f in dataclasses.fields(Timeouts)]


def test_the_plan_carries_the_typed_timeouts_and_prints_them_as_before():
    plan = plan_of(spec_of(timeouts={"preempt": 10, "kill": 2}))
    assert plan.timeouts.preempt == 10.0 and plan.timeouts.kill == 2.0
    printed = json.loads(plan.to_json())["timeouts"]
    assert list(printed) == list(TIMEOUT_DEFAULTS)
    assert printed == {**TIMEOUT_DEFAULTS, "preempt": 10.0, "kill": 2.0}
    with pytest.raises(dataclasses.FrozenInstanceError):
        plan.timeouts.kill = 9.0     # type: ignore[misc]


def test_the_tasks_side_falls_back_to_the_same_preempt_default():
    """A ps armed without TFCLUSTER_PREEMPT_GRACE serves on for timeouts.preempt's
    default; a task armed by the launcher is told the spec's value."""
    assert preemption.GRACE == Timeouts().preempt == \
        SCHEMA["properties"]["timeouts"]["properties"]["preempt"]["default"]
    plan = plan_of(spec_of(timeouts={"preempt": 7}))
    assert plan.task("ps").env[preemption.GRACE_ENV] == "7"
    assert preemption.GRACE_ENV not in plan_of(spec_of(timeouts={"preempt": 0})).task(
        "ps").env


@pytest.mark.parametrize(("keys", "message"), [
    ({"timeouts": {"kill": "soon"}}, "timeouts.kill: must be a number, got a string"),
    ({"timeouts": {"stall": -3}}, "timeouts.stall: must be at least 0.0, got -3"),
    ({"timeouts": {"poll": 0}}, "timeouts.poll: must be greater than 0"),
    ({"timeouts": {"kil": 1}}, "timeouts.kil: unknown key (allowed: evaluator, finish, job, "
                               "kill, poll, preempt, save, stall, start, unresponsive)"),
    ({"resources": {"worker": {"cpus": -1}}}, "resources.worker.cpus: must be at least 0, "
                                              "got -1"),
    ({"resources": {"worker": {"gpus": 1.5}}}, "resources.worker.gpus: must be an integer, "
                                               "got a number"),
    ({"resources": {"ps": {"memory": "lots"}}}, "resources.ps.memory: must look like '4G', "
                                                "'512M' or '2Gi', got 'lots'"),
    ({"resources": {"default": {"gpu_share": 1}}}, "resources.default.gpu_share: must be "
                                                   "true or false, got an integer"),
    ({"resources": {"worker": {"partition": ""}}}, "resources.worker.partition: must not be "
                                                   "empty"),
    ({"resources": {"worker": {"gpus": 1, "devices": ["0", "1"]}}},
     "resources.worker.devices: give gpus (a count) or devices (each task's GPUs), not both"),
    ({"check_storage": "yes"}, "check_storage: must be true or false, got a string"),
    ({"workdir": 3}, "workdir: must be a string, got an integer"),
    ({"model_dir": " "}, "model_dir: must not be empty"),
])
def test_each_value_is_checked_as_declared(keys, message):
    with pytest.raises(SpecError) as error:
        spec_of(**keys)
    assert str(error.value) == message


def test_a_required_key_says_what_it_is():
    with pytest.raises(SpecError, match=r"^model_dir: is required \(a path or fsspec URL"):
        parse_spec(json.dumps({"cluster": {"worker": 1}}))


def test_a_roles_resources_lie_over_the_default_ones():
    spec = spec_of(resources={"default": {"cpus": 1, "memory": "2Gi"},
                              "ps": {"memory": "4Gi"}, "worker": {"gpus": 0}})
    assert resources_for(spec.resources, "ps") == Resources(cpus=1, memory="4Gi")
    assert resources_for(spec.resources, "worker") == Resources(cpus=1, gpus=0, memory="2Gi")
    assert resources_for(spec.resources, "chief") == Resources(cpus=1, memory="2Gi")
    assert resources_for({}, "chief") == Resources()
    tasks = json.loads(plan_of(spec).to_json())["tasks"]
    assert {t["type"]: t["resources"] for t in tasks} == {
        "ps": {"cpus": 1, "memory": "4Gi"}, "chief": {"cpus": 1, "memory": "2Gi"},
        "worker": {"cpus": 1, "gpus": 0, "memory": "2Gi"}}


def test_the_spec_keys_are_the_declared_fields():
    """One declaration: the keys the parser takes, the schema's properties and the table
    are ``Spec``'s declared fields (besides $schema, description and the backends')."""
    names = [f.name for f in declared(Spec)]
    assert ("$schema", "description", *names) == TOP_LEVEL_KEYS
    assert [k for k in SCHEMA["properties"] if k in names] == names
    assert all(f.metadata["description"] for f in declared(Spec))
    assert {f.name for f in dataclasses.fields(Spec)} - set(names) == \
        {"backend_options", "source"}
    assert SCHEMA["required"] == [f.name for f in declared(Spec) if f.metadata["required"]]


def test_timeouts_and_resources_are_read_by_attribute_and_print_as_plain_json():
    """No key access (a misspelled key is mypy's error, not a quiet default): attributes,
    and ``to_dict()`` for plan.json with the given fields only."""
    timeouts = Timeouts(kill=2.0)
    assert timeouts.kill == 2.0 and timeouts.to_dict() == {**TIMEOUT_DEFAULTS, "kill": 2.0}
    res = Resources(cpus=2)
    assert res.cpus == 2 and res.memory is None and res.to_dict() == {"cpus": 2}
    with pytest.raises(TypeError):
        res["memory"]  # type: ignore[index]


@pytest.mark.parametrize("given, expected", [
    ("never", RestartPolicy("never", 0, 1.0)),
    ({"policy": "never", "max_restarts": 2}, RestartPolicy("never", 2, 1.0)),
    ({"backoff": 3}, RestartPolicy("on-failure", 3, 3.0)),
])
def test_restart_is_declared_and_fills_what_is_left_out_by_role_and_policy(given, expected):
    """``restart.ROLE``'s keys are declared (``RestartSettings``): the schema's entry is
    their properties; what a spec leaves out is the role's default (never: no restarts)."""
    assert SCHEMA["$defs"]["restart"]["oneOf"][1]["properties"] == \
        properties(RestartSettings)
    assert spec_of(restart={"ps": given}).restart["ps"] == expected


@pytest.mark.parametrize("given, error", [
    ({"policy": 3}, "restart.ps.policy: must be a string, got an integer"),
    ("sometimes", "restart.ps.policy: must be one of never, on-failure, always, "
                  "got 'sometimes'"),
    ({"max_restarts": None}, "restart.ps.max_restarts: must be an integer, got null"),
    ({"retries": 1}, "restart.ps.retries: unknown key (allowed: backoff, max_restarts, "
                     "policy)"),
])
def test_a_bad_restart_entry_gets_its_one_line(given, error):
    with pytest.raises(SpecError) as raised:
        spec_of(restart={"ps": given})
    assert str(raised.value) == error
