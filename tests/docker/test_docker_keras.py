"""The spec's ``keras`` route on the docker backend: the environment check runs in the
task's image (one probe container), so an image that lacks the route's packages is refused
in one line, exit 2, before any container starts. The suite's image has TensorFlow 2.15
only (no tf-keras, no jax): a TF 2.21 image with tf-keras (``--build-arg TF_VERSION=2.21.0``)
or one with jax and keras is not built here, which would cost minutes (docs/keras.md)."""

from __future__ import annotations

import json

import pytest
from docker_support import IMAGE, docker_spec
from support import run_launch

pytestmark = [pytest.mark.tf, pytest.mark.slow]


@pytest.mark.parametrize("keras, words", [
    ("tf-keras", "python has TensorFlow 2.15.1 but no tf-keras (the spec's \"keras\": "
                 "\"tf-keras\"): pip install --no-deps 'tf-keras==2.15.*'"),
    ("jax", "python cannot import jax (the spec's \"keras\": \"jax\"): pip install jax keras "
            "into that environment"),
])
def test_an_image_without_the_route_s_packages_is_refused_in_one_line(engine, image, tmp_path,
                                                                      keras, words):
    spec = tmp_path / "spec.json"
    spec.write_text(json.dumps(docker_spec(
        "/nowhere/model", check_storage=False, keras=keras, evaluator=None,
        cluster={"worker": ["localhost", "localhost"]},
        command=["python", "examples/estimator/train.py"])))
    done = run_launch(str(spec), "--run-dir", str(tmp_path / "run"), timeout=180)
    assert done.returncode == 2, done.stderr
    (line,) = done.stderr.strip().splitlines()
    assert line.startswith("launch: error: worker:0, worker:1") and IMAGE in line, line
    assert words in line, line
    assert engine.containers() == []
