"""docker/Dockerfile built for real (on a local debootstrap base, no registry): what runs
inside it."""

from __future__ import annotations

import json

import pytest
from docker_support import run_in

pytestmark = pytest.mark.slow


def test_default_command_is_launch_help(engine, image):
    done = run_in(engine, image)
    assert done.returncode == 0, done.stderr
    assert "usage: launch" in done.stdout


def test_tensorflow_and_tfcluster_import_in_the_image(engine, image):
    done = run_in(engine, image, "python", "-c",
                  "import json, tensorflow as tf, launcher, orchestrator; "
                  "print(json.dumps([tf.__version__, launcher.__file__, "
                  "hasattr(tf, 'estimator')]))", workdir="/")
    assert done.returncode == 0, done.stderr
    version, where, estimator = json.loads(done.stdout.strip().splitlines()[-1])
    assert version.startswith("2.15.")
    assert where.startswith("/opt/venv/")     # installed, not only in /opt/tfcluster
    assert estimator


@pytest.mark.parametrize("entry", ["examples/estimator/train.py", "examples/pss/train.py",
                                   "examples/mwms/train.py", "examples/ctr_data.py"])
def test_examples_entry_points_run(engine, image, entry):
    done = run_in(engine, image, "python", entry, "--help")
    assert done.returncode == 0, done.stderr
    assert "usage:" in done.stdout


def test_only_what_the_image_needs_is_in_it(engine, image):
    done = run_in(engine, image, "ls", "-A", "/opt/tfcluster")
    assert done.returncode == 0, done.stderr
    listed = set(done.stdout.split())
    assert {"launcher", "orchestrator", "examples", "cluster_specs", "pyproject.toml"} <= listed
    assert not listed & {".git", ".venv", ".venv-tf2", "tests", "docs", "bench", "runs"}
