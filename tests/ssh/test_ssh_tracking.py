"""MLflow tracking with the ssh backend on real hosts: the launcher logs in the same code
path as on the local backend (launcher/tracking/), reading model_dir as the tasks on the
hosts write it, and talking to a tracking server that only the launcher's machine reaches
(127.0.0.1 here: the hosts' network namespaces cannot). A stand-in chief writes the
evaluations (tests/tracking/jobs/metrics_writer.py); the real-TF tracking tests are in
tests/tracking/."""

from __future__ import annotations

import sys

import pytest
from infra.mlflow_server import read_run
from ssh_specs import write_spec
from support import REPO, run_launch

WRITER = str(REPO / "tests" / "tracking" / "jobs" / "metrics_writer.py")


@pytest.mark.slow
def test_ssh_run_in_mlflow(hosts, tmp_path, mlflow_server):
    spec = write_spec(tmp_path, hosts, {"chief": ["h1"]},
                      command=[sys.executable, WRITER, "3", "0.5"], max_steps=300,
                      check_storage=False,
                      tracking={"mlflow": {"tracking_uri": mlflow_server.url,
                                           "experiment": "ssh"}})
    done = run_launch(str(spec), timeout=180)
    console = done.stdout + done.stderr
    assert done.returncode == 0, console[-3000:]
    assert "MLflow tracking at" not in console
    (line,) = [x for x in console.splitlines()
               if "tfcluster: MLflow: http" in x and x.endswith("(new run)")]
    run = read_run(mlflow_server.url, line.split("/runs/")[1].split()[0])
    assert run["status"] == "FINISHED"
    assert (run["params"]["backend"], run["params"]["tasks.chief"]) == ("ssh", "1")
    assert run["params"]["command"] == f"{sys.executable} {WRITER} 3 0.5"
    assert run["history"]["evaluated/eval/loss"] == \
        [[100, pytest.approx(0.01)], [200, pytest.approx(0.005)], [300, pytest.approx(1 / 300)]]
    assert (run["tags"]["tfcluster.verdict"], run["tags"]["tfcluster.exit_status"]) == \
        ("succeeded", "0")
    assert "summary.json" in run["artifacts"]
    # the closing line: the run's URL, its status, and what MLflow took, counted true
    values = sum(len(history) for history in run["history"].values())
    assert f"tfcluster: MLflow: {line.split('MLflow: ')[1].split()[0]}: FINISHED, {values} " \
        f"metric values and {len(run['artifacts'])} artifacts logged" in console.splitlines()
