"""The live view's words: the progress bar's caption and the task counts."""

from __future__ import annotations

from launcher.output.live import status_words, task_words
from orchestrator.coordinator import Progress
from orchestrator.decisions import TaskState


def test_task_counts_up_done_restarting_lost():
    tasks = [TaskState("ps:0", "ps"),
             TaskState("chief:0", "chief", alive=False, exit_status="0"),
             TaskState("worker:0", "worker", restarting=True, restarts=1),
             TaskState("worker:1", "worker", alive=False, exit_status="1"),
             TaskState("evaluator:0", "evaluator", alive=False, exit_status="stopped (SIGTERM)",
                       stopped=True)]
    assert task_words(tasks, 1, 75) == ("tasks: 1 up, 1 done, 1 restarting, 1 lost · "
                                        "1 restart · 1m15s")


def test_caption_step_rate_eta():
    p = Progress(max_steps=600, events_step=150, steps_per_sec=12.5, eta_secs=36)
    assert status_words(p, p.latest_step, p.max_steps) == \
        "step 150/600 (25%) · 12.5 steps/s · ETA 36s"
    assert status_words(Progress(), None, None) == "waiting for the first checkpoint"


def test_the_live_view_says_what_happens_instead_of_a_stale_rate():
    from launcher.output.progress import JobState

    p = Progress(max_steps=939, events_step=1008, steps_per_sec=67.0, step_at=0.0)
    state = JobState(trainers_ended=True, ps=("ps:0",))
    assert status_words(p, 1008, 939, state) == \
        "step 1008/939 (100%) · training ended; stopping the parameter servers"
    assert status_words(p, 1008, 939, JobState(restarting=("ps:0",))) == \
        "step 1008/939 (100%) · restarting ps:0"
