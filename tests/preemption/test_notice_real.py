"""A preemption notice on real TensorFlow jobs written as users write them (no line of
them saves on a signal, checkpoints every 600 s by default): SIGTERM to `launch` mid-training
leaves a checkpoint at or past the step the chief had logged, nothing running, and the next
`launch` of the same spec resumes from it to max_steps. A chief and its ps: the rule looks
at the chief's checkpoint alone. The rules themselves (the stop order, the bound, a chief
that never saves): tests/launcher/test_preemption.py."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from support import (
    PY_TF215,
    REPO,
    run_launch,
    sigterm_once,
    tfcluster_tasks,
    wait_gone,
)

from launcher.signals import PREEMPTED
from orchestrator.checkpoints import newest_complete
from orchestrator.preemption import SAVING

pytestmark = [pytest.mark.tf, pytest.mark.slow]
JOBS = REPO / "tests" / "preemption" / "jobs"
MAX_STEPS = 700
NOTICE_AFTER = 200      # the chief's logged step when the notice comes
# Estimator's "loss = 0.69, step = 200 (...)"; the TF1 job's own "step = 200"
LOGGED = re.compile(r"\bstep = (\d+)")


def write_spec(tmp_path: Path, script: str) -> Path:
    doc = {"name": f"stock-{script.split('.')[0]}", "cluster": {"chief": 1, "ps": 1},
           "command": [PY_TF215, str(JOBS / script)], "model_dir": str(tmp_path / "model"),
           "max_steps": MAX_STEPS, "run_dir": str(tmp_path / "runs"),
           "env": {"PACE_SECS": "0.02"}, "timeouts": {"kill": 5, "finish": 30}}
    path = tmp_path / "spec.json"
    path.write_text(json.dumps(doc))
    return path


def chief_log(tmp_path: Path, nth: int) -> Path:
    runs = sorted((tmp_path / "runs").iterdir(), key=lambda d: d.stat().st_mtime)
    return runs[nth] / "logs" / "chief-0.log"


def logged_steps(log: Path) -> list[int]:
    try:
        text = log.read_text(errors="replace")
    except OSError:
        return []
    return [int(m.group(1)) for m in LOGGED.finditer(text)]


def preempt_mid_training(tmp_path: Path, spec: Path) -> tuple[int, str, int]:
    """`launch SPEC`, SIGTERM once the chief logged NOTICE_AFTER; (exit status, console,
    the last step the chief logged before the signal)."""
    def reached(log: str) -> bool:
        return any(int(m.group(1)) >= NOTICE_AFTER for m in LOGGED.finditer(log))

    done, log = sigterm_once(spec, tmp_path / "runs", reached)
    return done.returncode, done.stdout, [int(m.group(1)) for m in LOGGED.finditer(log)][-1]


@pytest.mark.parametrize("script", ["stock_estimator.py", "stock_tf1.py"])
def test_sigterm_saves_where_the_chief_was_and_the_next_launch_resumes(tmp_path, script):
    spec = write_spec(tmp_path, script)
    status, out, logged = preempt_mid_training(tmp_path, spec)
    assert status == PREEMPTED, out[-3000:]
    assert f"[chief:0] {SAVING}" in out
    saved = newest_complete(str(tmp_path / "model"))
    assert saved is not None and saved.step is not None and saved.step >= logged, \
        (saved, logged, out[-3000:])
    assert not wait_gone(timeout=10), "tasks left running after the preemption"
    (run,) = (tmp_path / "runs").iterdir()
    summary = json.loads((run / "summary.json").read_text())
    assert summary["training"] == "preempted"
    record = summary["preemption"]
    assert record["step_saved"] == saved.step
    assert record["steps_lost"] == record["step_reached"] - saved.step >= 0
    assert all(row["restarts"] == 0 for row in summary["tasks"])
    assert f"preempted at step {record['step_reached']}: checkpoint at step {saved.step}" in out

    again = run_launch(str(spec), timeout=300)
    assert again.returncode == 0, again.stdout[-3000:] + again.stderr[-3000:]
    first = min(logged_steps(chief_log(tmp_path, 1)))     # it restored the checkpoint
    assert saved.step <= first < saved.step + 100, (saved.step, first)
    final = newest_complete(str(tmp_path / "model"))
    assert final is not None and final.step == MAX_STEPS
    assert not tfcluster_tasks()
