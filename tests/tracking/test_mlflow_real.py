"""Every run in MLflow, against a real tracking server (`mlflow server`, SQLite store, local
artifact folder: tests/infra/mlflow_server.py) and real TensorFlow jobs, read back with MLflow's
own client: the example Estimator job's params, its metrics of each checkpoint evaluated
afresh (those of tfcluster_metrics.jsonl), its artifacts and verdict; a job preempted with
SIGTERM and launched again continues one MLflow run (`--retrain` starts another); metrics
appear while the job trains, and a server stopped then costs one line, the run directory
listing what was not logged; a detached run is logged by its detached launcher; a token
appears nowhere."""

from __future__ import annotations

import json
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest
from infra.mlflow_server import read_run, start_mlflow
from support import (
    PY_TF215,
    REPO,
    cancelled_on_exit,
    detach,
    launch_cmd,
    run_launch,
    sigterm_once,
    wait_gone,
    wait_state,
)

from launcher.signals import PREEMPTED

pytestmark = [pytest.mark.tf, pytest.mark.slow]
JOBS = REPO / "tests" / "preemption" / "jobs"
TOKEN = "tok-5ecret-never-shown-9f3"
FAILED = "MLflow tracking at"


def estimator_spec(tmp_path: Path, url: str, experiment: str) -> Path:
    """The example Estimator job, a chief, a ps and the evaluator, 120 steps."""
    spec = json.loads((REPO / "cluster_specs" / "estimator.json").read_text())
    spec.update(cluster={"chief": ["localhost"], "ps": ["localhost"]}, examples=4000,
                model_dir=str(tmp_path / "model"),
                command=[PY_TF215, "examples/estimator/train.py"],
                tracking={"mlflow": {"tracking_uri": url, "experiment": experiment,
                                     "tags": {"team": "ctr"}}})
    path = tmp_path / "spec.json"
    path.write_text(json.dumps(spec))
    return path


def paced_spec(tmp_path: Path, url: str, experiment: str, max_steps: int) -> Path:
    """A stock Estimator chief and ps, paced (tests/preemption/jobs/stock_estimator.py)."""
    doc = {"name": "paced", "cluster": {"chief": 1, "ps": 1},
           "command": [PY_TF215, str(JOBS / "stock_estimator.py")],
           "model_dir": str(tmp_path / "model"), "max_steps": max_steps,
           "run_dir": str(tmp_path / "runs"), "env": {"PACE_SECS": "0.02", "LOG_STEPS": "20"},
           "timeouts": {"kill": 5, "finish": 30},
           "tracking": {"mlflow": {"tracking_uri": url, "experiment": experiment}}}
    path = tmp_path / "spec.json"
    path.write_text(json.dumps(doc))
    return path


def mlflow_run_id(console: str) -> str:
    """The MLflow run the console named (its one opening "MLflow: URL (...)" line)."""
    (line,) = [x for x in console.splitlines()
               if "tfcluster: MLflow: http" in x and x.endswith(")")]
    return line.split("/runs/")[1].split()[0]


def files_text(*roots: Path) -> str:
    return "".join(p.read_text(errors="replace") for root in roots for p in root.rglob("*")
                   if p.is_file())


def test_example_job_in_mlflow(tmp_path, mlflow_server):
    spec = estimator_spec(tmp_path, mlflow_server.url, "example")
    run_dir = tmp_path / "run"
    done = run_launch(str(spec), "--run-dir", str(run_dir), timeout=400,
                      env={"MLFLOW_TRACKING_TOKEN": TOKEN})
    console = done.stdout + done.stderr
    assert done.returncode == 0, console[-3000:]
    assert FAILED not in console
    run = read_run(mlflow_server.url, mlflow_run_id(console))
    assert run["status"] == "FINISHED"
    params = run["params"]
    assert (params["name"], params["backend"], params["strategy"]) == \
        ("estimator", "local", "estimator")
    assert (params["tasks.chief"], params["tasks.ps"], params["tasks.evaluator"]) == \
        ("1", "1", "1")
    assert (params["max_steps"], params["epochs"], params["examples"]) == ("120", "3", "4000")
    assert params["command"] == f"{PY_TF215} examples/estimator/train.py"
    tags = run["tags"]
    assert tags["tfcluster.verdict"] == "succeeded" and tags["tfcluster.exit_status"] == "0"
    assert tags["tfcluster.run_dir"] == str(run_dir) and tags["team"] == "ctr"
    state = json.loads((run_dir / "state.json").read_text())
    assert tags["tfcluster.run_id"] == state["run_id"]
    # the metrics of each checkpoint evaluated afresh: those of tfcluster_metrics.jsonl
    records = [json.loads(x) for x in
               (tmp_path / "model" / "tfcluster_metrics.jsonl").read_text().splitlines()]
    assert len({r["step"] for r in records}) >= 2
    for r in records:
        for name, value in r["metrics"].items():
            history = run["history"][f"evaluated/{r['split']}/{name}"]
            assert [r["step"], pytest.approx(value)] in history
    assert run["history"]["train/loss"], "the training loss of the events file"
    assert {"summary.json", "plan.json", "report.html", "report.png", "spec/spec.json"} <= \
        set(run["artifacts"])
    # launch status gives the MLflow run's URL
    url = f"{mlflow_server.url}/#/experiments/{run['experiment_id']}/runs/"
    shown = run_launch("status", str(run_dir), "--json")
    assert json.loads(shown.stdout)["mlflow"]["url"].startswith(url)
    assert f"mlflow: {url}" in run_launch("status", str(run_dir)).stdout
    # the token: nowhere on the console, in the run directory or beside the lease
    assert TOKEN not in console
    assert TOKEN not in files_text(run_dir, tmp_path / "model")


def preempt_after(spec: Path, tmp_path: Path, step: int) -> subprocess.CompletedProcess:
    """`launch SPEC`, SIGTERM once the chief logged ``step``."""
    return sigterm_once(spec, tmp_path / "runs", lambda log: f"step = {step}" in log)[0]


def test_preempted_and_launched_again_is_one_mlflow_run(tmp_path, mlflow_server):
    spec = paced_spec(tmp_path, mlflow_server.url, "preempted", max_steps=500)
    first = preempt_after(spec, tmp_path, 200)
    assert first.returncode == PREEMPTED, first.stdout[-3000:]
    assert not wait_gone(timeout=10)
    again = run_launch(str(spec), timeout=300)
    console = again.stdout + again.stderr
    assert again.returncode == 0, console[-3000:]
    run_id = mlflow_run_id(first.stdout)
    assert mlflow_run_id(console) == run_id and "(continued, attempt 2)" in console
    run = read_run(mlflow_server.url, run_id)
    assert run["experiment_runs"] == 1
    assert run["status"] == "FINISHED"
    assert (run["tags"]["tfcluster.attempt"], run["tags"]["tfcluster.preemptions"]) == ("2", "1")
    assert run["tags"]["tfcluster.verdict"] == "succeeded"
    steps = [s for s, _ in run["history"]["train/loss"]]
    assert min(steps) < 200 and max(steps) >= 400, steps     # both launches' losses

    retrained = run_launch(str(spec), "--retrain", timeout=300)
    assert retrained.returncode == 0, retrained.stderr[-3000:]
    assert mlflow_run_id(retrained.stdout + retrained.stderr) != run_id


def logged_while_training(server_url: str, tmp_path: Path, proc: subprocess.Popen) -> bool:
    """The run's training loss is in MLflow while `launch` still runs (asked over REST)."""
    states = list((tmp_path / "runs").glob("*/state.json"))
    link = json.loads(states[0].read_text()).get("tracking") if states else None
    if not link:
        return False
    url = f"{server_url}/api/2.0/mlflow/runs/get?run_id={link['mlflow']['run_id']}"
    with urllib.request.urlopen(url, timeout=30) as answer:
        metrics = json.load(answer)["run"]["data"].get("metrics", [])
    return any(m["key"] == "train/loss" for m in metrics) and proc.poll() is None


def test_server_stopped_mid_run(tmp_path):
    server = start_mlflow(tmp_path / "server")
    try:
        spec = paced_spec(tmp_path, server.url, "stopped", max_steps=1000)
        proc = subprocess.Popen(launch_cmd(str(spec)), cwd=REPO, stdout=subprocess.PIPE,
                                stderr=subprocess.STDOUT, text=True, stdin=subprocess.DEVNULL)
        try:
            deadline = time.monotonic() + 240
            while not logged_while_training(server.url, tmp_path, proc):
                assert proc.poll() is None, "the job ended before a metric was logged"
                assert time.monotonic() < deadline, "no metric logged while training"
                time.sleep(0.5)
            server.stop()
            out, _ = proc.communicate(timeout=300)
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.communicate()
    finally:
        server.stop()
    assert proc.returncode == 0, out[-3000:]
    failures = [x for x in out.splitlines() if FAILED in x]
    assert len(failures) == 1, failures
    (run_dir,) = (tmp_path / "runs").iterdir()
    assert str(run_dir / "tracking_unlogged.jsonl") in failures[0]
    unlogged = [json.loads(x) for x in (run_dir / "tracking_unlogged.jsonl").read_text()
                .splitlines()]
    what = {u["what"] for u in unlogged}
    assert "status" in what and "artifact" in what, what
    state = json.loads((run_dir / "state.json").read_text())
    assert state["tracking"]["mlflow"]["unlogged"] == len(unlogged)


def test_detached_run_is_logged_by_the_detached_launcher(tmp_path, mlflow_server, runs):
    doc = json.loads(paced_spec(tmp_path, mlflow_server.url, "detached", 120).read_text())
    doc.pop("run_dir")
    doc["env"]["PACE_SECS"] = "0"
    spec = tmp_path / "detached.json"
    spec.write_text(json.dumps(doc))
    with cancelled_on_exit(tmp_path, runs):
        run_id = detach(spec, runs)
        state = wait_state(tmp_path, run_id, ("succeeded", "failed", "cancelled"), 300)
    assert state["state"] == "succeeded", state.get("reason")
    link = json.loads(run_launch("status", run_id, "--json", env=runs).stdout)["mlflow"]
    run = read_run(mlflow_server.url, link["run_id"])
    assert run["status"] == "FINISHED" and run["tags"]["tfcluster.run_id"] == run_id
    assert run["history"]["train/loss"] and "summary.json" in run["artifacts"]
    log = (tmp_path / "runs" / run_id / "launcher.log").read_text()
    assert f"MLflow: {link['url']} (new run)" in log


def test_restarts_and_a_failed_verdict(tmp_path, mlflow_server):
    """A chief that fails each time (a stand-in task, no TensorFlow), restarted twice: the
    restarts metric counts them, the run ends FAILED with the verdict and exit status."""
    doc = {"name": "failing", "cluster": {"chief": 1},
           "command": [sys.executable, str(REPO / "tests" / "local" / "fake_task.py")],
           "model_dir": str(tmp_path / "model"), "max_steps": 10,
           "env": {"FAKE_PLAN": json.dumps({"chief": "fail after 0.3"})},
           "restart": {"chief": {"policy": "always", "max_restarts": 2, "backoff": 0}},
           "tracking": {"mlflow": {"tracking_uri": mlflow_server.url,
                                   "experiment": "failing"}}}
    spec = tmp_path / "spec.json"
    spec.write_text(json.dumps(doc))
    done = run_launch(str(spec), "--run-dir", str(tmp_path / "run"), timeout=120)
    console = done.stdout + done.stderr
    assert done.returncode == 1, console[-3000:]
    run = read_run(mlflow_server.url, mlflow_run_id(console))
    assert run["status"] == "FAILED"
    assert (run["tags"]["tfcluster.verdict"], run["tags"]["tfcluster.exit_status"]) == \
        ("failed", "1")
    assert [value for _, value in run["history"]["restarts"]][-1] == 2
    assert f"MLflow: {mlflow_server.url}/#/experiments/{run['experiment_id']}/runs/" \
           f"{mlflow_run_id(console)}: FAILED, " in console
