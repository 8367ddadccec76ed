"""The spec parser: shapes from DESIGN.md, counts, ports, and one clear error per mistake."""

from __future__ import annotations

import json

import pytest

from launcher.api import parse_spec
from launcher.checks import Address
from launcher.errors import SpecError


def spec_text(**overrides) -> str:
    doc = {
        "name": "ctr",
        "cluster": {"chief": ["localhost"], "worker": ["localhost", "localhost"],
                    "ps": ["localhost:2223"]},
        "evaluator": "localhost",
        "command": ["python", "train.py"],
        "model_dir": "runs/ctr/model",
        "max_steps": 3000,
    }
    for key, value in overrides.items():
        if value is None:
            doc.pop(key, None)
        else:
            doc[key] = value
    return json.dumps(doc)


def error_of(text: str) -> str:
    with pytest.raises(SpecError) as info:
        parse_spec(text)
    return str(info.value)


def test_design_example_parses():
    spec = parse_spec(spec_text())
    assert spec.cluster["ps"] == [Address("localhost", 2223)]
    assert spec.cluster["worker"] == [Address("localhost"), Address("localhost")]
    assert spec.evaluator == Address("localhost")
    assert spec.max_steps == 3000 and spec.backend == "local"
    assert spec.trainers == [("chief", 0), ("worker", 0), ("worker", 1)]
    assert not spec.synchronous


def test_count_shorthand_and_ipv6():
    spec = parse_spec(spec_text(cluster={"worker": 3, "ps": ["[::1]:2222"]}))
    assert spec.cluster["worker"] == [Address("localhost")] * 3
    assert spec.cluster["ps"] == [Address("::1", 2222)]
    assert str(spec.cluster["ps"][0]) == "[::1]:2222"


def test_no_ps_and_several_trainers_is_synchronous():
    assert parse_spec(spec_text(cluster={"chief": 1, "worker": 2}, evaluator=None)).synchronous


@pytest.mark.parametrize(("overrides", "message"), [
    ({"cluster": {"chief": 2}}, "cluster.chief: at most one chief task, got 2"),
    ({"cluster": {"master": 1, "chief": 1}},
     "cluster.master: legacy 'master' cannot be used together with 'chief'"),
    ({"cluster": {"master": 1}},
     "evaluator: legacy 'master' cannot be used together with an evaluator"),
    ({"cluster": {"workers": 2}},
     "cluster.workers: unknown job name (allowed: chief, master, worker, ps)"),
    ({"cluster": {"ps": 1}}, "cluster: needs a task that trains: chief, master or worker"),
    ({"cluster": {"worker": ["a:1", "a:1"]}},
     "cluster.worker[1]: address a:1 is already used by cluster.worker[0]"),
    ({"cluster": {"worker": ["host:99999"]}},
     "cluster.worker[0]: address 'host:99999': port 99999 is outside 1-65535"),
    ({"cluster": {"worker": 0}}, "cluster.worker: task count must be at least 1, got 0"),
    ({"cluster": {"worker": "localhost"}},
     "cluster.worker: must be a list of addresses or a count of tasks on localhost, got a string"),
    ({"cluster": {"worker": 1, "evaluator": ["x"]}}, "cluster.evaluator: the evaluator is given"),
    ({"max_steps": 0}, "max_steps: must be at least 1, got 0"),
    ({"max_steps": "10"}, "max_steps: must be an integer, got a string"),
    ({"epochs": 2}, "epochs: give either max_steps or epochs/examples/batch_size, not both"),
    ({"max_steps": None, "epochs": 2}, "examples: is required together with epochs"),
    ({"command": []}, "command: must be a non-empty list of strings"),
    ({"command": ["python", 3]}, "command[1]: must be a string, got an integer"),
    ({"model_dir": None}, "model_dir: is required"),
    ({"backend": "yarn"}, "backend: unknown backend 'yarn'"),
    ({"evalutor": "localhost"}, "evalutor: unknown key"),
    ({"env": {"TF_CONFIG": "{}"}}, "env.TF_CONFIG: is set by tfcluster for every task"),
    ({"timeouts": {"stal": 3}}, "timeouts.stal: unknown key"),
    ({"restart": {"ps": "sometimes"}}, "restart.ps.policy: must be one of never, on-failure"),
])
def test_errors_name_the_field(overrides, message):
    assert message in error_of(spec_text(**overrides))


def test_broken_json_names_line_and_column():
    message = error_of('{\n  "cluster": {"worker": 1},\n  "model_dir": "m",\n}')
    assert "invalid JSON at line 4, column 1" in message


def test_top_level_must_be_an_object():
    assert error_of("[1, 2]") == "spec: must be an object, got a list"


def test_strategy_is_checked_against_the_cluster():
    assert "strategy: multi_worker_mirrored takes no ps" in error_of(
        spec_text(strategy="multi_worker_mirrored"))
    assert "strategy: unknown strategy 'pss'" in error_of(spec_text(strategy="pss"))
    assert parse_spec(spec_text(strategy="parameter_server")).trainers == [("worker", 0),
                                                                          ("worker", 1)]
