"""A restored chief in the fast layer: the real job loop over the scripted backend, the
real coordinator (polled on the loop's turns, with the loop's fake clock) over a model_dir
where a stand-in chief wrote its checkpoints and a backward events series in TensorFlow's
formats; then the closing read and the exit status rule. (tests/ending/test_restore_real.py
runs real TF1.)"""

from __future__ import annotations

import io

import fsspec
import pytest
from coordinator.tf_writes import FakeTrainer, tfrecord
from scripted_backend import Script, ScriptedBackend, run_job

from launcher.monitors.coordinator import CoordinatorMonitor
from launcher.output.closing import final_read
from launcher.output.console import Console
from launcher.output.summary import verdict
from launcher.records.events import EventLog
from orchestrator.checkpoints import CheckpointReader
from orchestrator.coordinator import Coordinator

pytestmark = pytest.mark.usefixtures("scripted_backend")
MAX_STEPS = 2000
TIMEOUTS = {"finish": 3, "kill": 1, "poll": 1, "stall": 5, "start": 1}


class PolledCoordinator(Coordinator):
    """The real coordinator, polled on each of the loop's turns instead of in a thread of
    its own (the loop's clock is fake)."""

    polling = False

    def start(self):
        return self

    def progress(self):
        if not self.polling:                 # poll_once reads progress() itself
            self.polling = True
            try:
                self.poll_once()
            finally:
                self.polling = False
        return super().progress()


def chief_wrote(tmp_path, steps: list[int]) -> str:
    """model.ckpt-200 and an events file with ``steps`` (a summary each), as a chief that
    restored mid-run leaves them."""
    url = str(tmp_path / "model")
    fs = fsspec.filesystem("file")
    FakeTrainer(fs, url).save(200)
    fs.pipe_file(f"{url}/events.out.tfevents.1796000000.host",
                 b"".join(tfrecord(s, b"\x0a\x04loss") for s in steps))
    return url


def run(tmp_path, url):
    backend = ScriptedBackend({"chief:0": [Script()]})          # trains until stopped
    coordinator = PolledCoordinator(url, max_steps=MAX_STEPS, stall=TIMEOUTS["stall"],
                                    clock=backend.clock)
    err = io.StringIO()
    monitor = CoordinatorMonitor(coordinator, Console(io.StringIO(), err),
                                 EventLog(str(tmp_path / "events.jsonl")), clock=backend.clock)
    result, out = run_job({"cluster": {"chief": 1, "ps": 1}, "max_steps": MAX_STEPS,
                           "timeouts": TIMEOUTS}, backend, tmp_path, monitors=[monitor],
                          training=monitor.training_view)
    return result, out.getvalue() + err.getvalue(), coordinator.progress()


def test_interleaved_series_past_max_steps_never_end_training(tmp_path):
    # the file: the restored series (37..136) and the older one going on (1554..)
    steps = [1300, 1325, 1350, 1374, 1452, 1477, 37, 62, 67, 91, 118, 136, 1554, 1800, 2000,
             2100]
    result, text, progress = run(tmp_path, chief_wrote(tmp_path, steps))
    assert (progress.events_step, progress.restored) == (136, (1477, 37))
    assert "reached max_steps" not in text                  # neither finish nor success
    assert result.status == 1 and result.reason.startswith("training stalled")


def test_a_restored_series_that_reaches_max_steps_ends_training_but_not_as_a_success(
        tmp_path):
    steps = [*range(0, 1500, 100), 200, *range(300, 2100, 100)]   # restored model.ckpt-200
    url = chief_wrote(tmp_path, steps)
    result, text, progress = run(tmp_path, url)
    assert progress.restored == (1400, 200) and progress.events_step == 2000
    assert "step 2000 in the chief's events file reached max_steps 2000" in text
    assert result.status == 0                               # every task ended ...
    closing = final_read(CheckpointReader(url), MAX_STEPS, False)
    assert verdict(result, closing) == (                    # ... but it is no success
        "training was ended by the launcher, but the newest complete checkpoint "
        "model.ckpt-200 is short of max_steps 2000, and chief:0 did not exit 0 by itself")
