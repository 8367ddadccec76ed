"""The live view on a terminal: task output scrolls while a status block stays at the
bottom (a progress bar with step/max_steps, rate, ETA; the latest evaluation; tasks up,
restarting, lost). Drawn with rich, imported only here, and this module only when the
console is a terminal (``launch --help`` never loads it)."""

from __future__ import annotations

import os
import signal
import sys
import time
from typing import IO, Any

from launcher.output.console import Console
from launcher.output.progress import (
    QUIET_AFTER,
    OutputProgress,
    duration_text,
    eval_text,
    output_progress,
    output_words,
    rate_words,
    state_words,
    step_text,
)

REFRESH_PER_SECOND = 4


class LiveConsole(Console):
    def __init__(self, verbose: bool = False, file: IO[str] | None = None):
        from rich.console import Console as RichConsole
        from rich.live import Live

        super().__init__(verbose=verbose)
        self._progress: Any = None
        self._tasks: list = []
        self._restarts = 0
        self._silent: list[str] = []
        self._state: Any = None      # what is happening (progress.JobState)
        self._began = time.monotonic()
        self._drawing = False
        self._closed = False
        self._stopping: tuple[list[str], str] = ([], "")   # tasks being stopped, and why
        self._stopped: set[str] = set()     # tasks the launcher stopped (never "silent")
        self._ignored_sigint = ignored_sigint_line()    # said once, when drawing begins
        self.rich = RichConsole(file=file or sys.stderr, highlight=False, soft_wrap=True)
        self.live = Live(get_renderable=self._render, console=self.rich,
                         refresh_per_second=REFRESH_PER_SECOND, transient=False,
                         redirect_stdout=True, redirect_stderr=True)

    def _draw(self) -> None:
        if not self._drawing and not self._closed:
            self._drawing = True
            self.live.start()
            if self._ignored_sigint:
                line, self._ignored_sigint = self._ignored_sigint, None
                self.info(line)

    def print_task_line(self, name: str, shown: str) -> None:
        from rich.text import Text

        self._draw()
        text = Text(f"[{name}] ", style="cyan")
        text.append_text(Text.from_ansi(shown))
        self.rich.print(text)

    def info(self, message: str) -> None:
        from rich.text import Text

        self._draw()
        text = Text("tfcluster: ", style="bold")
        text.append(message)
        self.rich.print(text)

    def progress_line(self, line: str) -> None:
        """Drawn as the status block instead."""

    def progress(self, progress: Any, tasks: list, restarts: int, silent: list | None = None,
                 state: Any = None) -> None:
        self._progress, self._tasks, self._restarts = progress, list(tasks), restarts
        self._stopped -= {t.name for t in tasks if t.running and not t.stopped and
                          t.name not in self._stopping[0]}      # started again
        self._state = state
        self._silent = list(silent or [])
        self._draw()

    def stopping(self, names: list[str], reason: str) -> None:
        self._stopping = (list(names), reason)
        self._stopped.update(names)

    def close(self) -> None:
        super().close()
        self._closed = True
        if self._drawing:
            self.live.refresh()
            self.live.stop()
            self._drawing = False

    def _render(self):
        from rich.progress_bar import ProgressBar
        from rich.table import Table
        from rich.text import Text

        p = self._progress
        step = p.latest_step if p is not None else None
        total = p.max_steps if p is not None else None
        grid = Table.grid(padding=(0, 1))
        grid.add_column(no_wrap=True)
        grid.add_column()
        bar = ProgressBar(total=float(total) if total else None,
                          completed=float(min(step or 0, total or 0)), width=32)
        now = time.monotonic()
        output = output_progress(self.steps, p, now, self._began) if p is not None else None
        words = status_words(p, step, total, self._state, output,
                             self.steps.moving(now, QUIET_AFTER))
        stopping, why = self._stopping
        if stopping:        # no rate nor ETA while the launcher stops tasks
            words = " · ".join([words.split(" · ")[0], f"stopping {', '.join(stopping)}: {why}"])
        silent = [n for n in self._silent if n not in self._stopped]
        if silent:
            words += f" · {', '.join(silent)} not answering"
        grid.add_row(bar, Text(words))
        if p is not None and p.latest_eval:
            grid.add_row(Text(""), Text(eval_text(p.latest_eval), style="green"))
        grid.add_row(Text(""), Text(task_words(self._tasks, self._restarts,
                                               time.monotonic() - self._began), style="dim"))
        return grid


def ignored_sigint_line() -> str | None:
    """The line a terminal user needs when Ctrl-C will do nothing (SIGINT inherited
    ignored: launcher/signals.py keeps it so), else None."""
    if signal.getsignal(signal.SIGINT) is not signal.SIG_IGN:
        return None
    return (f"Ctrl-C is ignored: this launcher was started with SIGINT ignored (a background "
            f"job of a shell); stop the run with `launch cancel` or `kill {os.getpid()}`")


def status_words(p: Any, step: int | None, total: int | None, state: Any = None,
                 output: OutputProgress | None = None, moving_at: float | None = None) -> str:
    """'step 120/602 (19%) · 66.2 steps/s · ETA 7s', or what happens instead of training
    (``state``: restarting, finishing, the evaluator's wait; launcher/output/progress.py);
    ``output``: the trainers' own word on their step when it is ahead of model_dir's."""
    happening = state_words(p, state) if p is not None and state is not None else None
    training = state is None or not (state.restarting or state.trainers_ended)
    if output is not None and training and (step is None or output.step > step):
        return " · ".join([step_text(output.step, total, output.estimated),
                           *(happening if happening is not None else output_words(output))])
    if step is None:
        first = "waiting for the first checkpoint" if p is None or p.checkpoint is None else \
            f"checkpoint {p.checkpoint.name}"
        return " · ".join([first, *(happening or [])])
    words = [f"step {step}/{total} ({100 * min(step, total) // total}%)" if total
             else f"step {step}",
             *(happening if happening is not None else
               rate_words(p, time.monotonic(), moving_at))]
    return " · ".join(words)


def task_words(tasks: list, restarts: int, elapsed: float) -> str:
    """'tasks: 4 up, 1 done, 0 restarting, 0 lost · 2 restarts · 12s'."""
    up = sum(1 for t in tasks if t.alive and not t.restarting)
    restarting = sum(1 for t in tasks if t.restarting)
    done = sum(1 for t in tasks if not t.alive and t.exit_status == "0")
    lost = sum(1 for t in tasks if not t.alive and not t.stopped and t.exit_status != "0")
    words = f"tasks: {up} up, {done} done, {restarting} restarting, {lost} lost"
    if restarts:
        words += f" · {restarts} restart{'s' if restarts > 1 else ''}"
    return f"{words} · {duration_text(elapsed)}"
