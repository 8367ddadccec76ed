"""The Slurm node step's agent (launcher/backends/agent/, entry ``serve``) as a plain
process here, without Slurm: what srun would run on a node, fed by the launcher's side
(slurm_node_step.py).
Fast; the real steps are in tests/slurm/test_slurm_backend.py."""

from __future__ import annotations

import os
import signal
import sys
import time

from launcher.backends.slurm_node_step import NODE_STUB as STUB
from launcher.backends.slurm_node_step import NodeStep
from launcher.plan import TaskPlan
from launcher.spec import Resources


def task(name: str, command: list[str]) -> TaskPlan:
    role, index = name.split(":")
    return TaskPlan(type=role, index=int(index), host="n1", port=1, command=command,
                    env={"TFCLUSTER_TASK": name}, cwd=None, auto_port=False, resources=Resources(),
                    raw_command=command, raw_env={})


def ended(handle, timeout: float = 10) -> int | None:
    deadline = time.monotonic() + timeout
    while handle.poll() is None and time.monotonic() < deadline:
        time.sleep(0.02)
    return handle.poll()


def test_one_agent_runs_each_task_with_its_own_output_signals_and_restart(tmp_path):
    step = NodeStep([sys.executable, "-I", "-S", "-c", STUB], dict(os.environ), "here")
    try:
        say = 'echo "$TFCLUSTER_TASK out"; echo "$TFCLUSTER_TASK err" >&2'
        chief = step.start(task("chief:0", ["sh", "-c", say + "; exit 3"]),
                           {"TFCLUSTER_TASK": "chief:0"})
        ps = step.start(task("ps:0", ["sh", "-c", say + "; exec sleep 60"]),
                        {"TFCLUSTER_TASK": "ps:0"})
        refused = step.start(task("worker:0", [str(tmp_path)]), {})
        # each task's output is its own, and all of it comes before its end
        assert chief.output.read() == b"chief:0 out\nchief:0 err\n"
        assert ended(chief) == 3
        assert ps.output.readline() == b"ps:0 out\n" and ps.poll() is None
        assert refused.output.read().startswith(b"tfcluster-node: worker:0: cannot start")
        assert ended(refused) == 126
        assert refused.start_failure.endswith(": it is a directory")
        # a signal reaches one task only; the same task started again runs in the same step
        ps.signal(signal.SIGTERM)
        assert ended(ps) == -signal.SIGTERM
        again = step.start(task("ps:0", ["sleep", "60"]), {})
        assert again.poll() is None and step.alive()
        time.sleep(0.2)
        assert again.poll() is None
    finally:
        step.close()     # end of the agent's stdin: it ends what runs, then itself
    assert ended(again) == -signal.SIGTERM
    assert step.proc.wait(timeout=15) == 0
