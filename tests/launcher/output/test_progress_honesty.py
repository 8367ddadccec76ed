"""The progress line does not present old figures as live: when no new step came for a
while it says so (and names the tasks that stopped answering gRPC) instead of the last rate
and ETA, and the rate comes from a window of several polls, not from two polls 1 s apart."""

from __future__ import annotations

import fsspec
from coordinator.tf_writes import FakeTrainer
from support import FakeClock

from launcher.output.progress import progress_line
from orchestrator.checkpoints import Checkpoint
from orchestrator.coordinator import Coordinator, Progress

CKPT = Checkpoint("model.ckpt-80", "/m/model.ckpt-80", 80, "estimator", 1, 80)


def test_a_quiet_job_says_so_instead_of_showing_its_last_rate_and_eta():
    p = Progress(max_steps=100000, checkpoint=CKPT, steps_per_sec=80.0, eta_secs=1250.0,
                 step_at=100.0)
    live = progress_line(p, 10, now=103.0)
    assert live == ("progress: step 80/100000 (0%), 80.0 steps/s, ETA 20m50s, "
                    "checkpoint model.ckpt-80")
    quiet = progress_line(p, 10, now=145.0, silent=["ps:0"])
    assert quiet == ("progress: step 80/100000 (0%), no new step for 45s, checkpoint "
                     "model.ckpt-80; ps:0 not answering")
    assert "steps/s" not in quiet and "ETA" not in quiet


def test_the_rate_needs_several_polls(tmp_path):
    clock = FakeClock()
    url = str(tmp_path / "model")
    trainer = FakeTrainer(fsspec.filesystem("file"), url)
    coord = Coordinator(url, max_steps=10000, clock=clock)
    rates = []
    for step in range(0, 800, 100):          # one checkpoint per 1-s poll
        trainer.save(step)
        rates.append(coord.poll_once().steps_per_sec)
        clock.sleep(1.0)
    # the first observation is left out (the time up to it is TF starting), then 0..4 s
    # of observations: no rate yet
    assert rates[:6] == [None] * 6
    assert rates[6:] == [100.0, 100.0]
    assert coord.progress().step_at == 7.0   # when the newest step was first seen


def test_the_live_view_says_it_too():
    import time

    from launcher.output.live import status_words

    p = Progress(max_steps=600, events_step=150, steps_per_sec=12.5, eta_secs=36,
                 step_at=time.monotonic() - 45)
    assert status_words(p, p.latest_step, p.max_steps) == \
        "step 150/600 (25%) · no new step for 45s"
