"""The agent's wire on its own (a Slurm node step's agent run here as a plain process, as
tests/launcher/backends/test_slurm_node_step.py does): how long N short tasks take from the first
start to the last exit through one agent, and how fast one task's output comes through its
frames. Run it on two trees side by side to compare them:

    PYTHONPATH=TREE .venv/bin/python bench/agent_wire.py [--tasks 200] [--megabytes 200]
        [--repeat 5]

Prints the median of each measure (seconds, MB/s).
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time

from launcher.backends.slurm_node_step import NodeStep
from launcher.plan import TaskPlan

try:                                        # this tree's stub, or the one before the agent
    from launcher.backends.slurm_node_step import NODE_STUB as STUB
except ImportError:
    from launcher.backends.slurm_node import STUB  # type: ignore[no-redef]


def task(name: str, command: list[str]) -> TaskPlan:
    role, index = name.split(":")
    return TaskPlan(type=role, index=int(index), host="here", port=1, command=command,
                    env={}, cwd=None, auto_port=False, resources={}, raw_command=command,
                    raw_env={})


def ended(handle, timeout: float = 600) -> int | None:
    deadline = time.monotonic() + timeout
    while handle.poll() is None and time.monotonic() < deadline:
        time.sleep(0.001)
    return handle.poll()


def starts(count: int) -> float:
    """N tasks of ``true`` in one agent: seconds from the first start to the last exit."""
    step = NodeStep([sys.executable, "-I", "-S", "-c", STUB], dict(os.environ), "here")
    try:
        began = time.perf_counter()
        handles = [step.start(task(f"worker:{i}", ["true"]), {}) for i in range(count)]
        for handle in handles:
            handle.output.read()
            assert ended(handle) == 0
        return time.perf_counter() - began
    finally:
        step.close()
        step.proc.wait()


def throughput(megabytes: int) -> float:
    """One task writing ``megabytes`` MB to stdout: MB/s read by the launcher's side."""
    step = NodeStep([sys.executable, "-I", "-S", "-c", STUB], dict(os.environ), "here")
    code = (f"import sys\nblock = b'x' * (1 << 20)\nfor _ in range({megabytes}):\n"
            "    sys.stdout.buffer.write(block)\n")
    try:
        began = time.perf_counter()
        handle = step.start(task("worker:0", [sys.executable, "-c", code]), {})
        got = 0
        while chunk := handle.output.read(1 << 20):
            got += len(chunk)
        assert got == megabytes << 20 and ended(handle) == 0
        return megabytes / (time.perf_counter() - began)
    finally:
        step.close()
        step.proc.wait()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--tasks", type=int, default=200)
    parser.add_argument("--megabytes", type=int, default=200)
    parser.add_argument("--repeat", type=int, default=5)
    args = parser.parse_args()
    took = [starts(args.tasks) for _ in range(args.repeat)]
    rate = [throughput(args.megabytes) for _ in range(args.repeat)]
    print(f"{args.tasks} tasks, start to last exit: {statistics.median(took):.2f} s "
          f"(median of {args.repeat})")
    print(f"one task's output: {statistics.median(rate):.0f} MB/s (median of {args.repeat})")


if __name__ == "__main__":
    main()
