"""Tracking off costs nothing (not one module of launcher/tracking/ imported), a bad
$MLFLOW_TRACKING_URI or $MLFLOW_EXPERIMENT_NAME is one line, exit 2, nothing started, and
a server that refuses the token (a stand-in answering 401) is one line, the job going on:
through `launch` itself. The spec's own keys: tests/faults/bad_input_corpus.py."""

from __future__ import annotations

import contextlib
import http.server
import json
import signal
import subprocess
import sys
import threading
from collections.abc import Iterator

import pytest
from support import REPO, launch_cmd, run_launch


def spec_file(tmp_path, **more) -> str:
    marker = tmp_path / "started"
    doc = {"name": "tiny", "cluster": {"chief": 1}, "model_dir": str(tmp_path / "model"),
           "max_steps": 10, "command": ["touch", str(marker)], **more}
    path = tmp_path / "spec.json"
    path.write_text(json.dumps(doc))
    return str(path)


@pytest.mark.parametrize("env, line", [
    ({"MLFLOW_TRACKING_URI": "file:///tmp/mlruns"},
     "launch: error: MLFLOW_TRACKING_URI: scheme 'file' is not supported: give the http:// or "
     "https:// URL of an MLflow tracking server (tfcluster logs through its REST API)"),
    ({"MLFLOW_TRACKING_URI": "databricks"},
     "launch: error: MLFLOW_TRACKING_URI: scheme 'databricks' is not supported: give the "
     "http:// or https:// URL of an MLflow tracking server (tfcluster logs through its REST "
     "API)"),
    ({"MLFLOW_TRACKING_URI": "http://127.0.0.1:9", "MLFLOW_EXPERIMENT_NAME": "a\tb"},
     "launch: error: MLFLOW_EXPERIMENT_NAME holds a control character (a line break, a tab): "
     "give a plain name"),
])
def test_bad_environment_is_one_line_and_exit_2(tmp_path, env, line):
    done = run_launch(spec_file(tmp_path), env=env, timeout=60)
    assert done.returncode == 2
    assert done.stderr.strip().splitlines() == [line]
    assert not (tmp_path / "started").exists() and not (tmp_path / "model").exists()


def test_tracking_off_imports_nothing_of_it(tmp_path):
    code = ("import sys, launcher.api as api\n"
            f"r = api.run({spec_file(tmp_path)!r}, quiet=True, run_dir={str(tmp_path / 'run')!r})\n"
            "assert r.status == 0, r.reason\n"
            "print(sorted(m for m in sys.modules if m.startswith('launcher.tracking')))")
    env = {k: v for k, v in __import__("os").environ.items() if not k.startswith("MLFLOW_")}
    env["PYTHONPATH"] = str(REPO)
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=120, env=env, cwd=REPO, stdin=subprocess.DEVNULL)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.strip().splitlines()[-1] == "[]"
    assert (tmp_path / "started").exists()


class Refusing(http.server.BaseHTTPRequestHandler):
    """A tracking server that refuses the token: 401 to every request."""

    def _refuse(self) -> None:
        self.send_response(401)
        self.send_header("Content-Type", "application/json")
        self.end_headers()
        self.wfile.write(b'{"error_code": "UNAUTHENTICATED", "message": "bad token"}')

    do_GET = do_POST = do_PUT = _refuse

    def log_message(self, *args) -> None:
        pass


def test_a_server_that_refuses_the_token_costs_one_line(tmp_path):
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Refusing)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        url = f"http://127.0.0.1:{server.server_address[1]}"
        spec = spec_file(tmp_path, command=["sleep", "2"],
                         tracking={"mlflow": {"tracking_uri": url}})
        done = run_launch(spec, "--run-dir", str(tmp_path / "run"), timeout=120,
                          env={"MLFLOW_TRACKING_TOKEN": "tok-refused-77"})
    finally:
        server.shutdown()
    console = done.stdout + done.stderr
    assert done.returncode == 0, console[-2000:]
    failed = [x for x in console.splitlines() if "MLflow tracking at" in x]
    assert len(failed) == 1 and "HTTP 401 UNAUTHENTICATED: bad token" in failed[0], failed
    unlogged = (tmp_path / "run" / "tracking_unlogged.jsonl").read_text()
    assert '"what": "end"' in unlogged
    assert "tok-refused-77" not in console + unlogged


@contextlib.contextmanager
def never_answering() -> Iterator[str]:
    """The URL of a tracking server too slow to answer: each request waits until the
    test ends (far beyond the tracker's 10 s per request), then 503."""
    release = threading.Event()

    class Silent(http.server.BaseHTTPRequestHandler):
        def _hang(self) -> None:
            release.wait(300)
            self.send_response(503)
            self.end_headers()

        do_GET = do_POST = do_PUT = _hang

        def log_message(self, *args) -> None:
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Silent)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        release.set()
        server.shutdown()
        server.server_close()


def test_a_server_that_never_answers_costs_one_line_and_a_bounded_wait(tmp_path):
    """The job ends when its tasks do, plus the documented wait at most (run_launch's
    timeout: the job's seconds, FINISH_WAIT, and room for a loaded machine's start); the
    console says the one failure and that it waits; the run directory lists the end and the
    evaluations MLflow did not get."""
    from launcher.tracking.tracker import FINISH_WAIT

    writer = str(REPO / "tests" / "tracking" / "jobs" / "metrics_writer.py")
    with never_answering() as url:
        spec = spec_file(tmp_path, command=[sys.executable, writer, "2", "0.5"],
                         tracking={"mlflow": {"tracking_uri": url}})
        done = run_launch(spec, "--run-dir", str(tmp_path / "run"),
                          timeout=FINISH_WAIT + 90)
    console = done.stdout + done.stderr
    assert done.returncode == 0, console[-2000:]
    failed = [x for x in console.splitlines() if "MLflow tracking at" in x]
    assert len(failed) == 1 and "timed out" in failed[0], failed
    assert f"tfcluster: MLflow: sending the end of the run to {url}" in console
    unlogged = [json.loads(x) for x in
                (tmp_path / "run" / "tracking_unlogged.jsonl").read_text().splitlines()]
    assert {u["what"] for u in unlogged} >= {"end", "metrics"}
    (metrics,) = [u["items"] for u in unlogged if u["what"] == "metrics"]
    assert {(m["key"], m["step"], m["value"]) for m in metrics} >= \
        {("evaluated/eval/loss", 100, 0.01), ("evaluated/eval/accuracy", 200, 0.2)}
    (end,) = [u for u in unlogged if u["what"] == "end"]
    assert end["verdict"] == "succeeded" and end["status"] == 0


def test_ctrl_c_while_the_end_waits_keeps_the_jobs_exit_status(tmp_path):
    """Ctrl-C during the end's wait for a server that never answers: the launcher stops
    waiting, the job's own exit status (0) stands, the end is listed as not logged."""
    writer = str(REPO / "tests" / "tracking" / "jobs" / "metrics_writer.py")
    lines = []
    with never_answering() as url:
        spec = spec_file(tmp_path, command=[sys.executable, writer, "2", "0.2"],
                         tracking={"mlflow": {"tracking_uri": url}})
        proc = subprocess.Popen(launch_cmd(spec, "--run-dir", str(tmp_path / "run")),
                                cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                text=True, stdin=subprocess.DEVNULL)
        try:
            assert proc.stdout is not None
            for line in proc.stdout:
                lines.append(line.rstrip("\n"))
                if "(Ctrl-C stops waiting)" in line:
                    proc.send_signal(signal.SIGINT)
            proc.wait(timeout=60)
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
    assert proc.returncode == 0, lines[-20:]
    failed = [x for x in lines if "MLflow tracking at" in x]
    assert len(failed) == 1 and "stopped waiting for the end: interrupted" in failed[0], failed
    unlogged = [json.loads(x) for x in
                (tmp_path / "run" / "tracking_unlogged.jsonl").read_text().splitlines()]
    (end,) = [u for u in unlogged if u["what"] == "end"]
    assert end["verdict"] == "succeeded" and end["status"] == 0
    assert json.loads((tmp_path / "run" / "state.json").read_text())["state"] == "succeeded"
