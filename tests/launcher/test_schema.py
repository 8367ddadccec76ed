"""The spec's JSON Schema (its backend sections from the options each backend declares,
launcher/backends/options.py) agrees with the parser on the example specs and on typical
mistakes."""

from __future__ import annotations

import json

import jsonschema
import pytest
from support import REPO

from launcher.api import parse_spec
from launcher.errors import SpecError

SPECS = REPO / "cluster_specs"
SCHEMA = json.loads((SPECS / "schema.json").read_text())
VALIDATOR = jsonschema.Draft202012Validator(SCHEMA)


def test_schema_is_valid():
    jsonschema.Draft202012Validator.check_schema(SCHEMA)


@pytest.mark.parametrize("path", sorted(p for p in SPECS.glob("*.json")
                                        if not p.name.endswith("schema.json")),
                         ids=lambda p: p.name)
def test_example_specs_pass_schema_and_parser(path):
    doc = json.loads(path.read_text())
    VALIDATOR.validate(doc)
    parse_spec(path.read_text(), source=str(path))


@pytest.mark.parametrize("doc", [
    {"cluster": {"chief": 2}, "model_dir": "m"},
    {"cluster": {"chief": 1, "master": 1}, "model_dir": "m"},
    {"cluster": {"ps": 1}, "model_dir": "m"},
    {"cluster": {"worker": 1}, "model_dir": "m", "epochs": 1},
    {"cluster": {"worker": 1}, "model_dir": "m", "evalutor": "x"},
    {"cluster": {"worker": ["host:port"]}, "model_dir": "m"},
    {"cluster": {"worker": 1}, "model_dir": "m", "env": {"TF_CONFIG": "{}"}},
    {"cluster": {"worker": 1}},
    {"cluster": {"worker": 1}, "model_dir": "m", "roles": {"workers": {"command": ["x"]}}},
    {"cluster": {"worker": 1}, "model_dir": "m", "roles": {"worker": {"cmd": ["x"]}}},
    {"cluster": {"worker": 1}, "model_dir": "m", "roles": {"worker": {"command": []}}},
    {"cluster": {"worker": 1}, "model_dir": "m",
     "roles": {"worker": {"env": {"TFCLUSTER_TASK_TYPE": "x"}}}},
    {"cluster": {"worker": 1}, "model_dir": "m", "env": {"CUDA_VISIBLE_DEVICES": "0"}},
    {"cluster": {"worker": 2}, "model_dir": "m",
     "resources": {"worker": {"gpus": 1, "devices": ["0", "1"]}}},
    {"cluster": {"worker": 2}, "model_dir": "m", "resources": {"default": {"devices": ["0"]}}},
    {"cluster": {"worker": 2}, "model_dir": "m", "resources": {"worker": {"devices": []}}},
    {"cluster": {"worker": 2}, "model_dir": "m", "resources": {"worker": {"devices": ["0;1"]}}},
    {"cluster": {"worker": 2}, "model_dir": "m", "resources": {"worker": {"gpu_share": 1}}},
    {"cluster": {"worker": 1}, "model_dir": "m", "tensorboard": "yes"},
    {"cluster": {"worker": 1}, "model_dir": "m", "tensorboard": {"port": 0}},
    {"cluster": {"worker": 1}, "model_dir": "m", "tensorboard": {"port": 70000}},
    {"cluster": {"worker": 1}, "model_dir": "m", "tensorboard": {"host": "x"}},
])
def test_schema_and_parser_both_refuse(doc):
    assert not VALIDATOR.is_valid(doc)
    with pytest.raises(SpecError):
        parse_spec(json.dumps(doc))


def test_schema_backend_sections_derive_from_the_registry():
    """cluster_specs/schema.json is what `python -m launcher.schema` makes of it."""
    from launcher.schema import refresh_schema

    assert refresh_schema(json.loads(json.dumps(SCHEMA))) == SCHEMA


@pytest.mark.parametrize("section", ["ssh", "slurm", "kubernetes"])
def test_schema_lists_each_backend_sections_keys(section):
    from launcher.backends import backend_class
    from launcher.backends.options import keys

    allowed = SCHEMA["properties"][section]["properties"]
    assert sorted(allowed) == sorted(keys(backend_class(section).OPTIONS))
    assert not VALIDATOR.is_valid({"cluster": {"worker": 1}, "model_dir": "m",
                                   section: {"no_such_option": 1}})


def test_schema_and_parser_both_take_roles():
    doc = {"cluster": {"worker": 1, "ps": 1}, "model_dir": "m", "command": ["python", "t.py"],
           "roles": {"ps": {"command": ["python", "ps.py", "--job_name=$(TFCLUSTER_TASK_TYPE)"],
                            "env": {"JOB_NAME": "$(TFCLUSTER_TASK_TYPE)"}, "workdir": "/srv"}}}
    VALIDATOR.validate(doc)
    spec = parse_spec(json.dumps(doc))
    assert spec.command_for("ps") == ["python", "ps.py", "--job_name=$(TFCLUSTER_TASK_TYPE)"]
    assert spec.command_for("worker") == ["python", "t.py"]
    assert spec.workdir_for("ps") == "/srv" and spec.workdir_for("worker") is None


def test_schema_and_parser_both_take_gpu_resources():
    doc = {"cluster": {"worker": 2, "ps": 1}, "model_dir": "m", "command": ["python", "t.py"],
           "resources": {"default": {"gpus": 1, "gpu_share": True},
                         "worker": {"devices": ["0,1", "GPU-8f6a"]}, "ps": {"gpus": 0}}}
    VALIDATOR.validate(doc)
    spec = parse_spec(json.dumps(doc))
    assert spec.resources["worker"]["devices"] == ["0,1", "GPU-8f6a"]
    assert spec.resources["default"] == {"gpus": 1, "gpu_share": True}


@pytest.mark.parametrize("value, port", [(True, None), ({}, None), ({"port": 7007}, 7007)])
def test_schema_and_parser_both_take_tensorboard(value, port):
    doc = {"cluster": {"worker": 1}, "model_dir": "m", "command": ["python", "t.py"],
           "tensorboard": value}
    VALIDATOR.validate(doc)
    assert parse_spec(json.dumps(doc)).tensorboard.port == port
    assert parse_spec(json.dumps({**doc, "tensorboard": False})).tensorboard is None
