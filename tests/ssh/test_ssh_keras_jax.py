"""``"keras": "jax"`` over ssh on the test hosts (network namespaces with their own sshd;
h1 and h2 see an /etc/hosts naming every host, as a usual server resolves its own name,
h3 does not): each host's JAX process is checked and started there with its place in the
collective. On h1 + h2 the job trains to max_steps and its final checkpoint is read back;
on h3, whose name resolves nowhere, Gloo fails and the failure is named with its fix
(docs/keras.md, the catalogue of known failures). Both processes on h3: each fails at once
(with one on h1, that one would wait JAX's 2-minute key-value timeout for the other)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from ssh_specs import write_spec
from support import REPO, run_launch

pytestmark = [pytest.mark.tf, pytest.mark.slow,
              pytest.mark.skipif(not (REPO / ".venv-jax" / "bin" / "python").exists(),
                                 reason="no .venv-jax (scripts/setup.sh)")]
PY_JAX = str(REPO / ".venv-jax" / "bin" / "python")
JAX_FIT = str(REPO / "tests" / "keras" / "jobs" / "keras_jax_fit.py")


def _summary(tmp_path: Path) -> dict:
    (summary,) = (tmp_path / "runs").glob("*/summary.json")
    return json.loads(summary.read_text())


def test_jax_fit_over_two_hosts_ends_at_max_steps_with_its_checkpoint(hosts, tmp_path):
    spec = write_spec(tmp_path, hosts, {"worker": ["h1", "h2"]}, keras="jax",
                      command=[PY_JAX, JAX_FIT], max_steps=8)
    done = run_launch(str(spec), timeout=300)
    assert done.returncode == 0, done.stderr
    for i in (0, 1):
        assert f"process {i} of 2: training done" in done.stdout
    # the final checkpoint, written on h1 by process 0, read back: its optimizer at step 8
    assert "final checkpoint final.keras, 0 steps past max_steps 8" in done.stderr
    summary = _summary(tmp_path)
    assert (summary["final_checkpoint"], summary["final_step"]) == ("final.keras", 8)
    assert [t["exit"] for t in summary["tasks"]] == [0, 0]
    model = tmp_path / "model"
    assert sorted(p.name for p in model.iterdir() if not p.name.startswith(".")) == \
        ["backup", "ckpt-1.weights.h5", "ckpt-2.weights.h5", "final.keras"]
    # nothing left running on h1 or h2: the hosts fixture checks it after the test


def test_jax_on_a_host_whose_name_does_not_resolve_is_named_with_its_fix(hosts, tmp_path):
    spec = write_spec(tmp_path, hosts, {"worker": ["h3", "h3"]}, keras="jax",
                      command=[PY_JAX, JAX_FIT], max_steps=8)
    done = run_launch(str(spec), timeout=300)
    assert done.returncode == 1, done.stderr
    assert "  cause: JAX's CPU collectives (Gloo) could not resolve this host's own name" \
        in done.stderr
    assert "  fix: make each host's name (`hostname`) resolve there" in done.stderr
    assert _summary(tmp_path)["known_failure"]["name"] == "gloo-hostname"
