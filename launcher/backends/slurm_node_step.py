"""The launcher's side of a Slurm node step: one ``srun`` step per node runs the agent
(launcher/backends/agent/, entry ``serve``), which starts every task of the job on that
node, so that slurmctld sees one step per node instead of one per task (docs/slurm.md,
"Steps"). The agent's frames are read by the one reader (agent/reader.py), so a task's
output is a plain byte stream, read as every backend's is. A task's handle ends when the
agent says it ended, or, without a word, when the step itself ended (then its status is
the step's, and the step's last stderr lines are the task's last output).
"""

from __future__ import annotations

import itertools
import signal

from launcher.backends.agent.entry import NODE_STUB as NODE_STUB
from launcher.backends.agent.reader import AgentHandle, AgentLink
from launcher.backends.agent.tasks import start_message
from launcher.plan import TaskPlan

STDERR_TAIL = 20        # lines of the step's own stderr kept for a task it takes down
LOST = -signal.SIGKILL  # a task whose step ended without a word from the agent
GRACE = 10.0            # seconds between SIGTERM and SIGKILL when the launcher goes


class NodeStep(AgentLink):
    """One ``srun`` step on one node running the agent, for all the job's tasks there."""

    def __init__(self, argv: list[str], env: dict[str, str], node: str):
        self.node = node
        self._starts = itertools.count(1)
        self.ended = False      # the step ended: a task started now ends at once
        super().__init__(argv, env, name=f"slurm-{node}")

    @property
    def tasks(self) -> dict[str, AgentHandle]:
        """The tasks it runs that have not ended."""
        with self._route:
            return {k: h for k, h in self.handles.items() if h.exit is None}

    def alive(self) -> bool:
        return not self.ended and self.proc.poll() is None

    def start(self, task: TaskPlan, env: dict[str, str]) -> AgentHandle:
        """``task`` in this step (a handle that has ended when the step has)."""
        return self.run(task, dict(start_message(task, task.cwd or None, env), host=task.host,
                                   grace=GRACE), key=f"{task.name}#{next(self._starts)}")

    def close(self) -> None:
        """End of the agent's stdin: it stops what still runs (TERM, then KILL) and ends."""
        self.close_stdin()

    def last_words(self) -> tuple[bytes | None, int | None]:
        status = self.proc.wait()
        self.ended = True
        tail = "".join(f"tfcluster: the Slurm step on {self.node}: {line}\n"
                       for line in self.said[-STDERR_TAIL:])
        return tail.encode(), (-status if status < 0 else LOST)
