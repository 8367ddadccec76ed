"""The recording kubectl of this folder's tests (fake_kubectl.py)."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from support import PY_TF215

HERE = Path(__file__).parent


@pytest.fixture
def fake_kubectl(tmp_path):
    """`kubectl` on PATH replaying a recorded scenario; returns (env, state dir, use)."""
    state = tmp_path / "kubectl"
    state.mkdir()
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    wrapper = bin_dir / "kubectl"
    wrapper.write_text(f'#!/bin/sh\nexec {PY_TF215} {HERE / "fake_kubectl.py"} "$@"\n')
    wrapper.chmod(0o755)
    env = {"PATH": f"{bin_dir}:{os.environ['PATH']}", "FAKE_KUBECTL_DIR": str(state)}

    def use(scenario: str, **extra) -> None:
        doc = json.loads((HERE / "recorded" / scenario).read_text())
        doc.update(extra)
        (state / "scenario.json").write_text(json.dumps(doc))

    return env, state, use
