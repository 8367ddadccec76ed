"""Launching the third-party scripts of tests/thirdparty/ as real jobs (TensorFlow 2.15),
for the tests of tests/ending: the command of every task and one `launch` run of a spec."""

from __future__ import annotations

import json
import shlex
from pathlib import Path

from support import PY_TF215, REPO, run_launch

THIRDPARTY = REPO / "tests" / "thirdparty"
CHIEF_AND_PS = {"chief": 1, "ps": 1}
CHIEF_ALONE = {"chief": 1}


def shell(script: str, *args: str) -> list[str]:
    """The command of every task: the script under TF 2.15, arguments from the task's
    environment (``$TFCLUSTER_MODEL_DIR``...)."""
    return ["sh", "-c", f"exec {shlex.quote(PY_TF215)} {THIRDPARTY / script} {' '.join(args)}"]


def launch(tmp_path: Path, doc: dict) -> tuple[object, dict, list[dict]]:
    """`launch --quiet` of ``doc`` (model_dir ``tmp_path/model``, a chief and a ps unless
    it says otherwise), spec in ``tmp_path/cluster.json``, run dir ``tmp_path/run``: the
    finished process, summary.json and events.jsonl."""
    doc = {"model_dir": str(tmp_path / "model"), "cluster": CHIEF_AND_PS, **doc}
    spec = tmp_path / "cluster.json"
    spec.write_text(json.dumps(doc))
    run_dir = tmp_path / "run"
    proc = run_launch(str(spec), "--quiet", "--run-dir", str(run_dir), timeout=240)
    summary = json.loads((run_dir / "summary.json").read_text())
    events = [json.loads(line) for line in (run_dir / "events.jsonl").read_text().splitlines()]
    return proc, summary, events
