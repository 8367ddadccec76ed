"""launcher/tracking/ without a server: the target from the spec and the environment (bad
input refused in one line), credentials kept out of every printed string, the params,
and what the follower reads of model_dir (each evaluation and each events record once).
The tracker against a real server: tests/tracking/."""

from __future__ import annotations

import json
import struct

import pytest
from coordinator.tf_writes import _varint, tfrecord

from launcher.api import parse_spec
from launcher.errors import UsageError
from launcher.model_dir import ModelDir
from launcher.plan import build_plan
from launcher.redact import masked_argv, masked_url
from launcher.tracking.follow import ModelDirFollower
from launcher.tracking.target import resolve, split_credentials
from launcher.tracking.tracker import run_params
from orchestrator.metrics_file import MetricsRecord, MetricsWriter

BASE = {"name": "ctr", "cluster": {"chief": 1, "worker": 2, "ps": 1}, "evaluator": "localhost",
        "model_dir": "/tmp/m", "command": ["python", "train.py", "--api-key=abc", "--lr=0.1"],
        "max_steps": 300}


def spec_with(**tracking):
    doc = dict(BASE)
    if tracking:
        doc["tracking"] = {"mlflow": tracking}
    return parse_spec(json.dumps(doc))


def test_off_without_spec_key_or_environment():
    assert resolve(spec_with(), env={}) is None


def test_environment_turns_it_on_and_the_spec_wins():
    env = {"MLFLOW_TRACKING_URI": "http://env:5000", "MLFLOW_EXPERIMENT_NAME": "from-env"}
    target = resolve(spec_with(), env=env)
    assert (target.base, target.experiment) == ("http://env:5000", "from-env")
    target = resolve(spec_with(tracking_uri="https://spec:443/", experiment="mine"), env=env)
    assert (target.base, target.experiment) == ("https://spec:443", "mine")
    assert resolve(spec_with(tracking_uri="http://h"), env={}).experiment == "ctr"


@pytest.mark.parametrize("env, names", [
    ({"MLFLOW_TRACKING_URI": "file:///tmp/mlruns"}, "MLFLOW_TRACKING_URI: scheme 'file'"),
    ({"MLFLOW_TRACKING_URI": "sqlite:///db"}, "MLFLOW_TRACKING_URI: scheme 'sqlite'"),
    ({"MLFLOW_TRACKING_URI": "http://"}, "MLFLOW_TRACKING_URI: names no host"),
    ({"MLFLOW_TRACKING_URI": "http://h", "MLFLOW_EXPERIMENT_NAME": "a\nb"},
     "MLFLOW_EXPERIMENT_NAME holds a control character"),
])
def test_a_bad_environment_is_one_line(env, names):
    with pytest.raises(UsageError) as e:
        resolve(spec_with(), env=env)
    assert str(e.value).startswith(names) and "\n" not in str(e.value)


def test_spec_without_uri_and_no_environment_is_refused():
    with pytest.raises(UsageError, match="tracking.mlflow.tracking_uri.*MLFLOW_TRACKING_URI"):
        resolve(spec_with(experiment="x"), env={})


def test_credentials_never_in_what_is_shown():
    base, auth = split_credentials("https://alice:s3cr%40t@mlflow.example:8443/prefix")
    assert base == "https://mlflow.example:8443/prefix" and "s3cr" not in base
    assert auth is not None and auth.startswith("Basic ")
    target = resolve(spec_with(tracking_uri="http://h:1"), env={"MLFLOW_TRACKING_TOKEN": "T0K"})
    assert target.auth == "Bearer T0K" and "T0K" not in repr(target)
    assert masked_url("sftp://bob:pw@host/models") == "sftp://bob:***@host/models"
    assert masked_url("/tmp/m") == "/tmp/m"


def test_params_name_the_job_and_mask_secret_arguments():
    spec = spec_with(tracking_uri="http://h")
    plan = build_plan(spec, port_for=lambda host: 2000)
    params = run_params(spec, plan, None)
    assert (params["name"], params["backend"], params["max_steps"]) == ("ctr", "local", "300")
    assert (params["tasks.chief"], params["tasks.worker"], params["tasks.ps"],
            params["tasks.evaluator"]) == ("1", "2", "1", "1")
    assert params["command"] == "python train.py '--api-key=***' --lr=0.1"
    assert masked_argv(["x", "--token", "abc", "--n", "3"]) == ["x", "--token", "***", "--n", "3"]


def scalar_event(step: int, tag: str, value: float) -> bytes:
    tag_bytes = tag.encode()
    value_msg = b"\x0a" + _varint(len(tag_bytes)) + tag_bytes + b"\x15" + struct.pack("<f", value)
    return tfrecord(step, b"\x0a" + _varint(len(value_msg)) + value_msg)


def test_follower_reads_each_evaluation_and_event_once(tmp_path):
    model_dir = tmp_path / "model"
    (model_dir / "eval").mkdir(parents=True)
    follower = ModelDirFollower(ModelDir(str(model_dir)))
    assert follower.look() == []
    writer = MetricsWriter(str(model_dir))
    writer.append(MetricsRecord(100, "ckpt-100", "eval", {"auc": 0.7}, 1000.0))
    events = model_dir / "events.out.tfevents.1.host"
    events.write_bytes(scalar_event(100, "loss", 0.5))
    (model_dir / "eval" / "events.out.tfevents.2.host").write_bytes(
        scalar_event(100, "accuracy", 0.75))
    got = {(m["key"], m["step"]): m["value"] for m in follower.look()}
    assert got == {("evaluated/eval/auc", 100): 0.7, ("train/loss", 100): 0.5,
                   ("tf_eval/accuracy", 100): 0.75}
    writer.append(MetricsRecord(200, "ckpt-200", "eval", {"auc": 0.8}, 1001.0))
    with open(events, "ab") as f:
        f.write(scalar_event(200, "loss", 0.25)[:-6])       # a record being written
    got = {(m["key"], m["step"]): m["value"] for m in follower.look()}
    assert got == {("evaluated/eval/auc", 200): pytest.approx(0.8)}
    with open(events, "ab") as f:
        f.write(scalar_event(200, "loss", 0.25)[-6:])
    got = {(m["key"], m["step"]): m["value"] for m in follower.look()}
    assert got == {("train/loss", 200): 0.25}


def test_follower_skips_a_record_larger_than_one_read(tmp_path, monkeypatch):
    import launcher.tracking.follow as follow

    model_dir = tmp_path / "model"
    model_dir.mkdir()
    big = tfrecord(1, b"\x0a" + _varint(3000) + b"g" * 3000)     # a graph-sized record
    (model_dir / "events.out.tfevents.1.host").write_bytes(big + scalar_event(5, "loss", 0.5))
    monkeypatch.setattr(follow, "READ_MAX", 1024)
    follower = ModelDirFollower(ModelDir(str(model_dir)))
    assert follower.look() == []            # the big record skipped, not read for ever
    got = {(m["key"], m["step"]): m["value"] for m in follower.look()}
    assert got == {("train/loss", 5): 0.5}


def test_events_folders_are_named_as_the_report_names_them():
    """One classifier of model_dir's events folders (orchestrator.tfformats) serves the
    report's series and the tracker's metric keys."""
    from launcher.tracking.follow import events_prefix
    from orchestrator.tfformats import events_dir_kind

    root = "/m"
    cases = {"/m": "train", "/m/train": "train", "/m/logs/train": "train",
             "/m/logs/validation": "validation", "/m/eval": "tf_eval",
             "/m/eval_holdout": "tf_eval_holdout", "/m/export": None, "/m/logs": None}
    assert {parent: events_prefix(parent, root) for parent in cases} == cases
    assert events_dir_kind("/m/", root) == "train"
