"""A real MLflow tracking server for tests and benchmarks: `mlflow server` from
.venv-mlflow (scripts/setup.sh makes it) on 127.0.0.1 and a free port, a SQLite store and
a local artifact folder under its own directory. ``read_run`` reads a run back with
MLflow's own client (tests/infra/mlflow_read.py, run by .venv-mlflow's Python).

    server = start_mlflow(tmp_dir)
    server.url                    # http://127.0.0.1:PORT
    read_run(server.url, run_id)  # {"status", "params", "tags", "history", "artifacts"}
    server.stop()
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import time
import urllib.request
from dataclasses import dataclass
from pathlib import Path

from infra.process_group import stop_group

REPO = Path(__file__).resolve().parent.parent.parent
MLFLOW_VENV = REPO / ".venv-mlflow"
PYTHON = MLFLOW_VENV / "bin" / "python"
READER = Path(__file__).with_name("mlflow_read.py")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@dataclass
class MlflowServer:
    url: str
    proc: subprocess.Popen
    log_path: str

    def stop(self) -> None:
        stop_group(self.proc, 15)


def start_mlflow(workdir: str | os.PathLike, timeout: float = 180.0) -> MlflowServer:
    """Start `mlflow server`; return once its REST API answers (its start takes 10-30 s
    on a loaded machine: a generous wait)."""
    workdir = Path(workdir)
    workdir.mkdir(parents=True, exist_ok=True)
    port = free_port()
    argv = [str(MLFLOW_VENV / "bin" / "mlflow"), "server", "--backend-store-uri",
            f"sqlite:///{workdir / 'mlflow.db'}", "--artifacts-destination",
            str(workdir / "artifacts"), "--host", "127.0.0.1", "--port", str(port),
            "--workers", "1"]
    log_path = str(workdir / "mlflow.log")
    with open(log_path, "wb") as log:
        proc = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT,
                                stdin=subprocess.DEVNULL, start_new_session=True, cwd=workdir)
    server = MlflowServer(f"http://127.0.0.1:{port}", proc, log_path)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and proc.poll() is None:
        try:
            with urllib.request.urlopen(f"{server.url}/api/2.0/mlflow/experiments/search"
                                        "?max_results=1", timeout=5):
                return server
        except OSError:
            time.sleep(0.5)
    server.stop()
    tail = Path(log_path).read_text(errors="replace")[-2000:]
    raise RuntimeError(f"mlflow server did not come up; log tail:\n{tail}")


def read_run(url: str, run_id: str) -> dict:
    """The run as MLflow's own client reads it: status, params, tags, every metric's
    history as [step, value] pairs, the artifacts' paths, and the experiment's run count."""
    done = subprocess.run([str(PYTHON), str(READER), url, run_id], capture_output=True,
                          text=True, timeout=120, stdin=subprocess.DEVNULL)
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout)
