"""The spec's JSON Schema (made from the declarations, launcher/spec/declared.py's key(): the
core spec's and each backend's options) agrees with the parser on the example specs and on
typical mistakes."""

from __future__ import annotations

import json
from pathlib import Path

import jsonschema
import pytest

from launcher.api import parse_spec
from launcher.backends import names as backend_names
from launcher.errors import SpecError

REPO = Path(__file__).resolve().parents[2]
SPECS = REPO / "cluster_specs"
DOC = REPO / "docs" / "spec.md"
BEGIN = "<!-- fields: generated from launcher/spec/ by tests/launcher/test_schema.py -->"
END = "<!-- /fields -->"
SCHEMA = json.loads((SPECS / "schema.json").read_text())
VALIDATOR = jsonschema.Draft202012Validator(SCHEMA)


def generated_table() -> str:
    text = DOC.read_text()
    return text.split(BEGIN, 1)[1].split(END, 1)[0].strip()


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
    {"cluster": {"worker": 1}, "model_dir": "m", "tracking": {"wandb": {}}},
    {"cluster": {"worker": 1}, "model_dir": "m",
     "tracking": {"mlflow": {"tracking_uri": "file:///tmp/mlruns"}}},
    {"cluster": {"worker": 1}, "model_dir": "m",
     "tracking": {"mlflow": {"tracking_uri": "databricks"}}},
    {"cluster": {"worker": 1}, "model_dir": "m", "tracking": {"mlflow": {"experiment": ""}}},
    {"cluster": {"worker": 1}, "model_dir": "m", "tracking": {"mlflow": {"tags": {"a": 1}}}},
    {"cluster": {"worker": 1}, "model_dir": "m", "tracking": {"mlflow": {"uri": "http://h"}}},
])
def test_schema_and_parser_both_refuse(doc):
    assert not VALIDATOR.is_valid(doc)
    with pytest.raises(SpecError):
        parse_spec(json.dumps(doc))


def test_schema_file_is_current():
    """cluster_specs/schema.json is what `python -m launcher.schema` makes of the
    declarations (the core spec's, each registered backend's options)."""
    from launcher.schema import schema_text

    assert (SPECS / "schema.json").read_text() == schema_text(), \
        "cluster_specs/schema.json is out of date: python -m launcher.schema"


def test_docs_spec_shows_the_declared_fields():
    from launcher.schema import field_table

    assert generated_table() == field_table(), \
        "docs/spec.md is out of date: python tests/launcher/test_schema.py"


def test_the_parser_takes_the_declared_keys_and_defaults():
    """One declaration: what validate() accepts and fills in is what the schema says."""
    from launcher.spec import RESOURCE_KEYS, ROLE_KEYS, TIMEOUT_DEFAULTS, TOP_LEVEL_KEYS

    props = SCHEMA["properties"]
    assert set(TOP_LEVEL_KEYS) == set(props) - set(backend_names())
    assert {k: v["default"] for k, v in props["timeouts"]["properties"].items()} == \
        TIMEOUT_DEFAULTS
    assert set(ROLE_KEYS) == set(SCHEMA["$defs"]["role"]["properties"])
    assert set(RESOURCE_KEYS) == set(SCHEMA["$defs"]["resources"]["properties"])
    spec = parse_spec(json.dumps({"cluster": {"worker": 1}, "model_dir": "m"}))
    assert spec.timeouts.to_dict() == TIMEOUT_DEFAULTS
    assert spec.check_storage is props["check_storage"]["default"]
    assert spec.tf_config_model_dir is props["tf_config_model_dir"]["default"]
    assert spec.backend == props["backend"]["default"]
    with pytest.raises(SpecError, match="unknown key"):
        parse_spec(json.dumps({"cluster": {"worker": 1}, "model_dir": "m",
                               "timeouts": {"no_such_timeout": 1}}))


@pytest.mark.parametrize("section", ["ssh", "slurm", "kubernetes"])
def test_schema_lists_each_backend_sections_keys(section):
    from launcher.backends import backend_class
    from launcher.spec.declared import declared

    allowed = SCHEMA["properties"][section]["properties"]
    assert sorted(allowed) == sorted(f.name for f in declared(backend_class(section).OPTIONS))
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
    assert spec.resources["worker"].devices == ["0,1", "GPU-8f6a"]
    assert spec.resources["default"].to_dict() == {"gpus": 1, "gpu_share": True}


@pytest.mark.parametrize("value, port", [(True, None), ({}, None), ({"port": 7007}, 7007)])
def test_schema_and_parser_both_take_tensorboard(value, port):
    doc = {"cluster": {"worker": 1}, "model_dir": "m", "command": ["python", "t.py"],
           "tensorboard": value}
    VALIDATOR.validate(doc)
    assert parse_spec(json.dumps(doc)).tensorboard.port == port
    assert parse_spec(json.dumps({**doc, "tensorboard": False})).tensorboard is None


if __name__ == "__main__":
    from launcher.schema import field_table

    head, rest = DOC.read_text().split(BEGIN, 1)
    DOC.write_text(f"{head}{BEGIN}\n{field_table()}\n{END}{rest.split(END, 1)[1]}")


def test_schema_and_parser_both_take_tracking():
    doc = {"cluster": {"worker": 1}, "model_dir": "m", "command": ["python", "t.py"],
           "tracking": {"mlflow": {"tracking_uri": "https://mlflow.example:5000",
                                   "experiment": "ctr", "run_name": "nightly",
                                   "tags": {"team": "ads"}}}}
    VALIDATOR.validate(doc)
    spec = parse_spec(json.dumps(doc))
    assert spec.tracking is not None
    assert (spec.tracking.tracking_uri, spec.tracking.experiment, spec.tracking.run_name,
            spec.tracking.tags) == ("https://mlflow.example:5000", "ctr", "nightly",
                                    {"team": "ads"})
