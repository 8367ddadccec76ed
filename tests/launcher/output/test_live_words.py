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


def test_while_the_launcher_stops_tasks_the_bar_says_so_and_they_are_not_silent():
    """Trainers being stopped past max_steps: no 'ETA 4s' left standing, and no 'chief:0 not
    answering' for the chief the launcher stopped itself."""
    import io
    import time

    from rich.console import Console as RichConsole

    from launcher.output.live import LiveConsole

    live = LiveConsole(file=io.StringIO())
    p = Progress(max_steps=8000, events_step=7666, steps_per_sec=80.0, eta_secs=4.0,
                 step_at=time.monotonic())
    tasks = [TaskState("chief:0", "chief", running=True), TaskState("ps:0", "ps", running=True)]
    live.progress(p, tasks, 0, silent=[])
    live.stopping(["chief:0"], "past max_steps 8000")
    live.progress(p, tasks, 0, silent=["chief:0"])

    def shown() -> str:
        screen = io.StringIO()
        RichConsole(file=screen, width=200).print(live._render())
        return screen.getvalue()
    during = shown()
    assert "step 7666/8000 (95%) · stopping chief:0: past max_steps 8000" in during
    assert "ETA" not in during and "not answering" not in during
    live.stopping([], "")
    after = [TaskState("chief:0", "chief", alive=False, exit_status="stopped (SIGTERM)",
                       stopped=True), TaskState("ps:0", "ps", running=True)]
    live.progress(p, after, 0, silent=["chief:0", "ps:0"])
    assert "ps:0 not answering" in shown() and "chief:0 not answering" not in shown()
    live.close()
