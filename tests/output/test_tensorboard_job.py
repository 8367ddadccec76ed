"""TensorBoard with a real run, seen by TensorBoard's HTTP API and in headless Chromium.

The Estimator example (TensorFlow 2.15) with ``"tensorboard": true``: TensorBoard's API lists
the run's ``loss`` while the job runs and ``launch status`` shows its URL; Ctrl-C ends the
job and TensorBoard with it. Then ``launch tensorboard RUN`` serves the finished run, whose
page (TensorBoard's JS app) renders the run and its ``loss`` in Chromium, and ``launch
report``'s page shows its tables and its picture there."""

from __future__ import annotations

import json
import re
import signal
import socket
import subprocess
import threading
import time
import urllib.request
from pathlib import Path

import psutil
import pytest
from headless_chromium import dump_dom, screenshot, visible_text
from support import (
    PY_TF215,
    REPO,
    cancelled_on_exit,
    detach,
    launch_cmd,
    marked_processes,
    run_launch,
)

# one worker runs the module (its tests share one Estimator run: tests/conftest.py)
pytestmark = pytest.mark.tf
URL_LINE = re.compile(r"TensorBoard: (http://\S+)")


class Launched:
    """A `launch` process whose stderr lines are collected as they come."""

    def __init__(self, *args: str):
        self.proc = subprocess.Popen(launch_cmd(*args), cwd=REPO, stdout=subprocess.DEVNULL,
                                     stderr=subprocess.PIPE, stdin=subprocess.DEVNULL,
                                     text=True)
        self.lines: list[str] = []
        self.reader = threading.Thread(target=self._read, daemon=True)
        self.reader.start()

    def _read(self) -> None:
        for line in self.proc.stderr:
            self.lines.append(line.rstrip("\n"))

    def wait_for(self, pattern: re.Pattern, timeout: float) -> re.Match:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            found = next((m for m in map(pattern.search, list(self.lines)) if m), None)
            if found:
                return found
            assert self.proc.poll() is None, "\n".join(self.lines[-30:])
            time.sleep(0.2)
        raise AssertionError(f"no {pattern.pattern!r} in {timeout}s:\n" +
                             "\n".join(self.lines[-30:]))

    def interrupt(self, timeout: float = 180) -> int:
        self.proc.send_signal(signal.SIGINT)
        status = self.proc.wait(timeout=timeout)
        self.reader.join(timeout=10)
        return status


def get_json(url: str):
    with urllib.request.urlopen(url, timeout=10) as answer:
        return json.loads(answer.read())


def listening(port: int) -> bool:
    try:
        with socket.create_connection(("localhost", port), timeout=2):
            return True
    except OSError:
        return False


def tensorboards(logdir: Path) -> list:
    """This session's TensorBoards of ``logdir`` still running."""
    found = []
    for p in marked_processes():
        try:
            argv = p.cmdline()
        except psutil.Error:
            continue
        if "tensorboard" in " ".join(argv) and str(logdir) in argv:
            found.append(p)
    return found


@pytest.fixture(scope="module")
def served_run(tmp_path_factory):
    """The Estimator example with TensorBoard, run until TensorBoard lists its loss and
    the evaluator evaluated a checkpoint, then Ctrl-C. A chief and the evaluator: workers
    and a ps would add nothing TensorBoard shows (the chief writes the train events), and
    the ps two TensorFlow starts' worth of CPU (it serves every training step)."""
    tmp = tmp_path_factory.mktemp("tensorboard")
    spec = json.loads((REPO / "cluster_specs" / "estimator.json").read_text())
    for key in ("epochs", "examples", "batch_size"):
        spec.pop(key)
    spec["cluster"].pop("worker")
    spec["cluster"].pop("ps")
    spec.update(max_steps=100_000, model_dir=str(tmp / "model"), run_dir=str(tmp / "runs"),
                tensorboard=True, command=[PY_TF215, "examples/estimator/train.py",
                                           "--data-dir", str(tmp / "data")])
    (tmp / "spec.json").write_text(json.dumps(spec))
    run = Launched(str(tmp / "spec.json"), "--quiet")
    try:
        url = run.wait_for(URL_LINE, 300).group(1)
        deadline = time.monotonic() + 300
        tags: dict = {}
        metrics = tmp / "model" / "tfcluster_metrics.jsonl"
        while time.monotonic() < deadline:
            assert run.proc.poll() is None, "\n".join(run.lines[-30:])
            tags = get_json(f"{url}data/plugin/scalars/tags")
            if "loss" in tags.get(".", {}) and metrics.exists() and \
                    metrics.read_text().strip():       # the chief's loss, and an evaluation
                break
            time.sleep(1)
        run_dir = next((tmp / "runs").iterdir())
        status = run_launch("status", str(run_dir), timeout=60)
    finally:
        code = run.interrupt()
    return {"url": url, "tags": tags, "status": status.stdout, "exit": code,
            "run_dir": run_dir, "lines": run.lines, "model_dir": tmp / "model"}


def test_tensorboard_lists_the_loss_while_the_job_runs_and_ends_with_it(served_run):
    url = served_run["url"]
    port = int(url.rsplit(":", 1)[1].strip("/"))
    assert url == f"http://localhost:{port}/"
    assert "loss" in served_run["tags"]["."], served_run["tags"]     # the chief's events
    assert f"tensorboard: {url}" in served_run["status"].splitlines()
    assert served_run["exit"] == 130, "\n".join(served_run["lines"][-20:])
    assert not listening(port) and tensorboards(served_run["model_dir"]) == []
    state = json.loads((served_run["run_dir"] / "state.json").read_text())
    assert state["tensorboard"]["state"] == "ended"
    assert "TensorBoard" in (served_run["run_dir"] / "logs" / "tensorboard.log").read_text()


def test_launch_tensorboard_serves_the_finished_run_seen_in_chromium(served_run):
    board = Launched("tensorboard", str(served_run["run_dir"]))
    try:
        url = board.wait_for(URL_LINE, 180).group(1)
        seen = visible_text(dump_dom(url))
    finally:
        assert board.interrupt(60) == 0
    assert "TensorBoard" in seen and "Run" in seen
    assert "eval" in seen                   # the evaluator's run, in the runs table
    assert "loss" in seen                   # the loss chart's heading
    assert tensorboards(served_run["model_dir"]) == []


def test_the_report_page_in_chromium(served_run):
    run_dir: Path = served_run["run_dir"]
    done = run_launch("report", str(run_dir), timeout=120)
    assert done.returncode == 0, done.stderr
    page = (run_dir / "report.html").as_uri()
    seen = visible_text(dump_dom(page, budget_ms=2000))
    assert "Evaluation of each checkpoint" in seen and "Loss against step" in seen
    assert f"run {run_dir.name}" in seen
    assert "model.ckpt-0" in seen or any(s.startswith("model.ckpt-") for s in seen)
    from PIL import Image

    shot = Image.open(screenshot(page, run_dir / "report-screenshot.png")).convert("RGB")
    pixels = getattr(shot, "get_flattened_data", shot.getdata)()
    red = sum(1 for px in pixels if _near(px, (214, 39, 40)))
    blue = sum(1 for px in pixels if _near(px, (31, 119, 180)))
    # the picture's eval loss (red) and accuracy (blue) were drawn: at least a marker and its
    # legend entry each (one evaluation, the fixture's least: 85 and 92 pixels; none: 0)
    assert red > 40 and blue > 40, (red, blue)


def _near(pixel: tuple, color: tuple, tolerance: int = 40) -> bool:
    return all(abs(a - b) <= tolerance for a, b in zip(pixel, color))


FAKE_TASK = str(REPO / "tests" / "local" / "fake_task.py")


def test_a_detached_run_keeps_its_tensorboard_until_cancelled(tmp_path, runs):
    spec = {"name": "detached-board", "cluster": {"chief": 1}, "command": [PY_TF215, FAKE_TASK],
            "env": {"FAKE_PLAN": json.dumps({"chief": "forever"})},
            "model_dir": str(tmp_path / "model"), "tensorboard": True,
            "timeouts": {"kill": 2, "unresponsive": 0}}
    (tmp_path / "spec.json").write_text(json.dumps(spec))
    with cancelled_on_exit(tmp_path, runs):
        run_id = detach(tmp_path / "spec.json", runs)
        deadline = time.monotonic() + 240
        url = None
        while url is None and time.monotonic() < deadline:
            status = run_launch("status", run_id, env=runs, timeout=60)
            found = re.search(r"^tensorboard: (http://\S+)$", status.stdout, re.M)
            url = found.group(1) if found else None
            time.sleep(1)
        assert url, status.stdout
        assert get_json(f"{url}data/runs") == []        # served while the run lives
        cancel = run_launch("cancel", run_id, env=runs, timeout=180)
        assert cancel.returncode == 0, cancel.stderr
    port = int(url.rsplit(":", 1)[1].strip("/"))
    assert not listening(port) and tensorboards(tmp_path / "model") == []
    after = run_launch("status", run_id, env=runs, timeout=60).stdout
    assert f"tensorboard: ended with the run; `launch tensorboard {run_id}` serves the run" \
        in after
