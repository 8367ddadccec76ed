"""max_steps ends scripts that neither stop there nor save often, on real TensorFlow: the
launcher sends the savers the preemption notice's save request once the step reached
max_steps without a covering checkpoint, waits for that checkpoint, then ends the job.
Scripts as users write them (tests/ending/jobs/): a stock Estimator with RunConfig's
defaults (a checkpoint every 600 s) and no TrainSpec.max_steps, the same resumed after a
preemption, a TF1 MonitoredTrainingSession loop with its default save_checkpoint_secs
and no StopAtStepHook, a ParameterServerStrategy loop that saves every 600 s and asks
``requested()``; and the same loop without it (no save route): one line when max_steps is
seen, a verdict that names the steps lost. Each of them trains hundreds of steps/s here:
a 600 s timer would leave its final checkpoint far behind (or hundreds of thousands of
steps past max_steps); the request lands it within the steps of a few seconds
(``WINDOW``). The rules on the scripted backend: tests/launcher/test_end_save_request.py."""

from __future__ import annotations

import json
import re
import subprocess
from pathlib import Path

import pytest
from support import (
    PY_TF215,
    PY_TF221,
    REPO,
    run_launch,
    sigterm_once,
    tfcluster_tasks,
    wait_gone,
)

from launcher.ending import AT_MAX_STEPS
from launcher.signals import PREEMPTED
from orchestrator.checkpoints import CheckpointReader

pytestmark = [pytest.mark.tf, pytest.mark.slow]
JOBS = REPO / "tests" / "ending" / "jobs"
WINDOW = 1500        # steps: a few seconds of training at this machine's rates, at most
LOGGED = re.compile(r"\bstep = (\d+)")


def spec_of(tmp_path: Path, name: str, doc: dict) -> Path:
    full = {"name": name, "model_dir": str(tmp_path / "model"),
            "run_dir": str(tmp_path / "runs"), "timeouts": {"kill": 5}, **doc}
    path = tmp_path / "spec.json"
    path.write_text(json.dumps(full))
    return path


def last_run(tmp_path: Path) -> Path:
    return sorted((tmp_path / "runs").iterdir(), key=lambda d: d.stat().st_mtime)[-1]


def summary_of(tmp_path: Path) -> dict:
    return json.loads((last_run(tmp_path) / "summary.json").read_text())


def final_step(tmp_path: Path) -> int:
    ckpt = CheckpointReader(str(tmp_path / "model")).newest_complete()
    assert ckpt is not None and ckpt.step is not None
    return ckpt.step


def saved_on_request(proc: subprocess.CompletedProcess, tmp_path: Path, max_steps: int
                     ) -> dict:
    """The checks every job that saved on request passes; its summary.json."""
    assert proc.returncode == 0, proc.stderr[-4000:]
    final = final_step(tmp_path)
    assert max_steps <= final <= max_steps + WINDOW, (final, proc.stderr[-3000:])
    summary = summary_of(tmp_path)
    assert summary["training"] == "finished" and summary["final_step"] == final
    record = summary["save_request"]
    assert record["saved"] and record["notified"] == ["chief:0"]
    assert f"checkpoint at step {final} complete in model_dir" in record["outcome"]
    assert f"final checkpoint {Path(summary['final_checkpoint']).name}, " \
           f"{final - max_steps} steps past max_steps {max_steps} (saved on request at " \
           "max_steps)" in proc.stderr
    assert "tfcluster: waiting for" not in proc.stderr     # no timer-driven save waited for
    assert not wait_gone(timeout=10), "tasks left running"
    return summary


def test_a_stock_estimator_without_max_steps_saves_on_request_and_is_evaluated(tmp_path):
    spec = spec_of(tmp_path, "stock-no-max-steps", {
        "cluster": {"chief": 1, "worker": 1, "ps": 1}, "evaluator": "localhost",
        "command": [PY_TF215, str(JOBS / "estimator_no_max_steps.py")], "max_steps": 800})
    proc = run_launch(str(spec), timeout=300)
    summary = saved_on_request(proc, tmp_path, 800)
    assert summary["evaluation"] == "evaluated"
    assert summary["evaluated_step"] == summary["final_step"]
    assert [t["exit"] for t in summary["tasks"] if t["task"] == "chief:0"] == [0]


def test_the_same_estimator_resumed_after_a_preemption_saves_on_request(tmp_path):
    spec = spec_of(tmp_path, "stock-resumed", {
        "cluster": {"chief": 1, "ps": 1},
        "command": [PY_TF215, str(JOBS / "estimator_no_max_steps.py")], "max_steps": 3000})
    first, _ = sigterm_once(spec, tmp_path / "runs",
                            lambda log: any(int(m) >= 200 for m in LOGGED.findall(log)))
    assert first.returncode == PREEMPTED, first.stdout[-3000:]
    preempted = final_step(tmp_path)
    assert 200 <= preempted < 3000, preempted

    again = run_launch(str(spec), timeout=300)
    saved_on_request(again, tmp_path, 3000)
    chief = (last_run(tmp_path) / "logs" / "chief-0.log").read_text(errors="replace")
    first = int(LOGGED.findall(chief)[0])
    assert preempted <= first <= preempted + 100, (preempted, first)    # it resumed


def test_a_tf1_loop_with_default_checkpoint_secs_saves_on_request(tmp_path):
    spec = spec_of(tmp_path, "tf1-no-stop", {
        "cluster": {"chief": 1, "worker": 1, "ps": 1},
        "command": [PY_TF215, str(JOBS / "tf1_no_stop.py")], "max_steps": 800})
    saved_on_request(run_launch(str(spec), timeout=300), tmp_path, 800)


def test_a_pss_loop_that_asks_requested_saves_on_request(tmp_path):
    spec = spec_of(tmp_path, "pss-requested", {
        "cluster": {"chief": 1, "worker": 1, "ps": 1}, "strategy": "parameter_server",
        "command": [PY_TF221, str(JOBS / "pss_timer_saves.py")], "max_steps": 300})
    summary = saved_on_request(run_launch(str(spec), timeout=300), tmp_path, 300)
    assert "requested()" in summary["save_request"]["answers"]["chief:0"]


def test_a_loop_with_no_save_route_is_said_and_its_lost_steps_named(tmp_path):
    spec = spec_of(tmp_path, "pss-no-route", {
        "cluster": {"chief": 1, "worker": 1, "ps": 1}, "strategy": "parameter_server",
        "command": [PY_TF221, str(JOBS / "pss_timer_saves.py")], "max_steps": 300,
        "env": {"ASK": "0"}, "timeouts": {"kill": 5, "finish": 3, "save": 10}})
    proc = run_launch(str(spec), timeout=300)
    assert proc.returncode == 1, proc.stderr[-3000:]
    said = [line for line in proc.stderr.splitlines()
            if line.startswith(f"tfcluster: {AT_MAX_STEPS}: ") and "cannot save" in line]
    assert said == [f"tfcluster: {AT_MAX_STEPS}: nothing in chief:0 saves on a notice (no "
                    "training session open): it cannot save on request; waiting for its own "
                    "save or end (at most timeouts.save 10s from training's end)"], \
        proc.stderr[-3000:]
    summary = summary_of(tmp_path)
    record = summary["save_request"]
    reached = record["step_reached"]
    assert summary["training"] == "stopped short" and summary["final_step"] is None
    assert reached > 300 and record["steps_lost"] == reached
    assert summary["reason"].endswith(f"{reached} steps trained (no checkpoint was written) "
                                      f"were lost: step {reached} was reached")
    assert "job FAILED (exit status 1) after" in proc.stderr
    assert "not saved at max_steps: " in proc.stderr and "requested()" in proc.stderr
    assert not wait_gone(timeout=10) and not tfcluster_tasks()


def test_a_mwms_loop_with_preemption_checkpoint_handler_saves_on_request(tmp_path):
    """MultiWorkerMirroredStrategy: the request is SIGTERM to every trainer, which TF's
    PreemptionCheckpointHandler takes: it saves at a step the workers agree on and exits
    (its status 42, read as stopped on request)."""
    spec = spec_of(tmp_path, "mwms-handler", {
        "cluster": {"worker": 2},
        "command": [PY_TF221, str(JOBS / "mwms_preemption_handler.py")], "max_steps": 300})
    proc = run_launch(str(spec), timeout=300)
    assert proc.returncode == 0, proc.stderr[-4000:]
    final = final_step(tmp_path)
    assert 300 <= final <= 300 + WINDOW, (final, proc.stderr[-3000:])
    summary = summary_of(tmp_path)
    assert summary["training"] == "finished" and summary["final_step"] == final
    record = summary["save_request"]
    assert record["saved"] and record["notified"] == ["worker:0", "worker:1"]
    assert "SIGTERM to every trainer, for PreemptionCheckpointHandler" in proc.stderr
    assert f"final checkpoint {Path(summary['final_checkpoint']).name}, " \
           f"{final - 300} steps past max_steps 300 (saved on request at max_steps)" \
           in proc.stderr
    assert not wait_gone(timeout=10), "tasks left running"
