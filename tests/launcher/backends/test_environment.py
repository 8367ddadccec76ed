"""Environment checks that the corpus cannot reach through the local backend's shortcuts."""

from __future__ import annotations

import json
import os
import sys

import pytest

from launcher.api import parse_spec
from launcher.backends.local import LocalBackend
from launcher.backends.storage_check import check_shared_storage
from launcher.errors import PreflightError
from launcher.plan import build_plan


class ProbingLocal(LocalBackend):
    """The local backend, probing every task as a remote backend must."""

    local_processes = False


def test_a_missing_interpreter_is_named_not_model_dir(tmp_path):
    spec = parse_spec(json.dumps({"cluster": {"chief": 1}, "command": ["python3.99", "t.py"],
                                  "model_dir": str(tmp_path / "model"), "max_steps": 1}))
    backend = ProbingLocal()
    plan = build_plan(spec, port_for=backend.allocate_port, place=backend.place)
    with pytest.raises(PreflightError) as e:
        check_shared_storage(plan, backend)
    assert str(e.value).splitlines()[1] == (
        "  chief:0 on host localhost (?): the storage check could not run python3.99 there "
        "(exit status 127): [Errno 2] No such file or directory: 'python3.99'")
    assert "cannot write model_dir" not in str(e.value)
    assert not (tmp_path / "model").exists()


def probed_plan(tmp_path, command, **extra):
    spec = parse_spec(json.dumps({"cluster": {"chief": 1, "worker": 1}, "command": command,
                                  "model_dir": str(tmp_path / "model"), **extra}))
    backend = ProbingLocal()
    return build_plan(spec, port_for=backend.allocate_port, place=backend.place), backend


@pytest.mark.parametrize("command, extra, message", [
    (["no-such-trainer"], {},
     "chief:0, worker:0 on host localhost: program no-such-trainer not found on PATH ("),
    ([sys.executable, "-c", "pass"], {"workdir": "/no/such/dir"},
     "chief:0, worker:0 on host localhost: working directory /no/such/dir does not exist"),
    (["python3.99", "t.py"], {},
     "chief:0, worker:0: python3.99 cannot run on host localhost (exit status 127): [Errno 2] "
     "No such file or directory: 'python3.99'; Python 3 is needed there to check and start "
     "the tasks"),
])
def test_programs_are_checked_where_the_tasks_run(tmp_path, command, extra, message):
    """What the Slurm backend runs on each node before any task starts, here through the
    local backend's probe."""
    from launcher.backends.environment import check_programs_by_probe

    plan, backend = probed_plan(tmp_path, command, **extra)
    with pytest.raises(PreflightError) as e:
        check_programs_by_probe(plan, backend)
    assert message in str(e.value)


def test_programs_that_are_there_pass_the_probe(tmp_path):
    from launcher.backends.environment import check_programs_by_probe

    plan, backend = probed_plan(tmp_path, [sys.executable, "-c", "pass"])
    check_programs_by_probe(plan, backend)


def local_launch(tmp_path, command, **extra):
    from support import run_launch

    spec = tmp_path / "spec.json"
    spec.write_text(json.dumps({"cluster": {"chief": 1, "ps": 1}, "command": command,
                                "model_dir": str(tmp_path / "model"), "max_steps": 1,
                                "workdir": str(tmp_path), **extra}))
    return run_launch(str(spec), timeout=120)


def test_local_a_missing_script_is_one_line_before_anything_starts(tmp_path):
    done = local_launch(tmp_path, [sys.executable, "-u", "train.py"])
    assert done.returncode == 2
    assert done.stderr.strip() == (f"launch: error: ps:0, chief:0: script train.py not found "
                                   f"in {tmp_path} (the task's workdir)")
    assert not (tmp_path / "model").exists()


def test_local_an_interpreter_without_tensorflow_is_named(tmp_path):
    (tmp_path / "train.py").write_text("import tensorflow as tf\n")
    done = local_launch(tmp_path, ["/usr/bin/python3", "train.py"])
    assert done.returncode == 2
    assert done.stderr.strip() == (
        "launch: error: ps:0, chief:0: /usr/bin/python3 cannot import tensorflow (the entry "
        "script train.py imports it): install TensorFlow for that interpreter, or give the "
        "task one that has it")


def test_local_tensorboard_missing_for_the_chiefs_interpreter_is_named(tmp_path):
    (tmp_path / "train.py").write_text("print('no tensorflow')\n")
    done = local_launch(tmp_path, ["/usr/bin/python3", "train.py"], tensorboard=True)
    assert done.returncode == 2
    assert done.stderr.strip() == (
        "launch: error: chief:0: no tensorboard for /usr/bin/python3 (the spec asks for "
        "TensorBoard): pip install tensorboard into that environment")


@pytest.mark.parametrize("argv, script", [
    (["python3", "-u", "-W", "ignore", "t.py", "--x"], "t.py"),
    (["/opt/venv/bin/python3.11", "-X", "dev", "t.py"], "t.py"),
    (["python", "-m", "pkg.train"], None), (["python", "-c", "pass"], None),
    (["bash", "t.py"], None), (["python"], None),
])
def test_entry_script_of_a_python_command_line(argv, script):
    from launcher.backends.agent.probes import entry_script

    assert entry_script(argv) == script


@pytest.mark.tf
def test_a_model_dir_tensorflow_cannot_open_is_named_though_fsspec_could(tmp_path):
    """TensorFlow 2.15 has no s3:// filesystem of its own (tensorflow-io brings it): the
    launcher's fsspec opens s3:// where the task's TensorFlow cannot."""
    from support import PY_TF215

    from launcher.backends.agent.probes import environment_problems

    (tmp_path / "train.py").write_text("import tensorflow as tf\n")
    item = {"task": "chief:0", "program": PY_TF215, "argv": [PY_TF215, "train.py"],
            "model_dir": "s3://bucket/model", "env": {}}
    problems, version = environment_problems(item, str(tmp_path), os.environ["PATH"])
    assert version is not None and version.startswith("2.15")
    assert len(problems) == 1, problems
    assert problems[0].startswith(f"model_dir s3://bucket/model: TensorFlow {version} of "
                                  f"{PY_TF215} cannot open it (")
    assert "'s3' not implemented" in problems[0]
    assert problems[0].endswith("; pip install tensorflow-io and import tensorflow_io in "
                                "the script")
