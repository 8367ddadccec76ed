"""Cost of the liveness probe, and how fast it sees a frozen task, against real TensorFlow.

    .venv/bin/python bench/liveness_probe.py [--tasks 16] [--polls 200]

One TensorFlow 2.15 process runs ``--tasks`` in-process gRPC servers (one per task of a
ps/worker cluster, as TensorFlow's own multi-worker tests do), so 16 tasks cost one
process. The launcher side is measured in this process:
- cost of one poll: GetStatus to every task at once (``GrpcProber.ask_all``), CPU time of
  this process (every thread: grpc's included) per poll, and the wall time of a poll; as a
  share of one core at the default probe period (launcher/liveness.PROBE_PERIOD);
- a whole LivenessMonitor (its probe thread, and ``tick`` every 50 ms as the job loop
  calls it) watching the tasks for ``--watch`` seconds: CPU share of one core;
- the same poll with all tasks frozen (SIGSTOP of the server process): a poll then takes
  one deadline, whatever the number of tasks;
- detection: a LivenessMonitor with ``--unresponsive`` s watching the tasks, the server
  process frozen, time until the monitor names it lost (goal: <= unresponsive + 5 s).
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import statistics
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(REPO)]

from launcher.backends.local import free_port  # noqa: E402
from launcher.monitors.liveness import PROBE_PERIOD, GrpcProber, LivenessMonitor  # noqa: E402
from orchestrator.decisions import TaskState  # noqa: E402

PY_TF215 = str(REPO / ".venv" / "bin" / "python")
SERVERS = """
import json, sys, tensorflow as tf
cluster = json.loads(sys.argv[1])
servers = [tf.distribute.Server(tf.train.ClusterSpec(cluster), job_name=j, task_index=i,
                                start=True)
           for j in cluster for i in range(len(cluster[j]))]
print("serving", flush=True)
servers[0].join()
"""


def cpu_per_poll(prober: GrpcProber, addresses: list[str], polls: int) -> tuple[float, float]:
    """(median wall s, CPU s per poll over all polls)."""
    walls = []
    cpu0 = time.process_time()
    for _ in range(polls):
        t0 = time.perf_counter()
        answers = prober.ask_all(addresses)
        walls.append(time.perf_counter() - t0)
        assert len(answers) == len(addresses)
    return statistics.median(walls), (time.process_time() - cpu0) / polls


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--tasks", type=int, default=16)
    p.add_argument("--polls", type=int, default=200)
    p.add_argument("--unresponsive", type=float, default=10.0)
    p.add_argument("--runs", type=int, default=3, help="detection measurements")
    p.add_argument("--watch", type=float, default=20.0,
                   help="seconds of a whole monitor (thread and job-loop ticks) measured")
    args = p.parse_args(argv)
    ps = max(1, args.tasks // 4)
    cluster = {"ps": [f"localhost:{free_port()}" for _ in range(ps)],
               "worker": [f"localhost:{free_port()}" for _ in range(args.tasks - ps)]}
    addresses = [a for j in cluster for a in cluster[j]]
    proc = subprocess.Popen([PY_TF215, "-c", SERVERS, json.dumps(cluster)],
                            env=dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2"),
                            stdout=subprocess.DEVNULL, start_new_session=True)
    prober = GrpcProber()
    try:
        t0 = time.monotonic()
        while not all(a.ok for a in prober.ask_all(addresses).values()):
            time.sleep(0.1)
        print(f"{args.tasks} TF servers answering after {time.monotonic() - t0:.1f}s")
        prober.ask_all(addresses)
        wall, cpu = cpu_per_poll(prober, addresses, args.polls)
        print(f"live, {args.tasks} tasks: poll {wall * 1000:.2f} ms wall, {cpu * 1000:.3f} ms "
              f"CPU; {100 * cpu / PROBE_PERIOD:.3f}% of a core at one poll per "
              f"{PROBE_PERIOD:g}s")
        one_wall, one_cpu = cpu_per_poll(prober, addresses[:1], args.polls)
        print(f"live, 1 task: poll {one_wall * 1000:.2f} ms wall, {one_cpu * 1000:.3f} ms CPU")
        monitor = LivenessMonitor(30.0, prober=GrpcProber())
        start = time.monotonic()
        tasks = [TaskState(f"worker:{i}", "worker", a, started_at=start, running=True)
                 for i, a in enumerate(addresses)]
        monitor.tick(tasks)
        while not all(monitor.answered(t.name, start) for t in tasks):
            time.sleep(0.05)
        cpu0, t0 = time.process_time(), time.monotonic()
        while time.monotonic() - t0 < args.watch:
            monitor.tick(tasks)         # the job loop's turns (every 50 ms)
            time.sleep(0.05)
        used = (time.process_time() - cpu0) / (time.monotonic() - t0)
        monitor.close()
        print(f"monitor thread + ticks, {args.tasks} tasks answering, {args.watch:g}s: "
              f"{100 * used:.2f}% of a core ({monitor.polls} polls)")
        os.killpg(proc.pid, signal.SIGSTOP)
        fwall, fcpu = cpu_per_poll(prober, addresses, 5)
        print(f"frozen, {args.tasks} tasks: poll {fwall * 1000:.0f} ms wall (one deadline), "
              f"{fcpu * 1000:.3f} ms CPU")
        os.killpg(proc.pid, signal.SIGCONT)
        detections = []
        for _ in range(args.runs):
            monitor = LivenessMonitor(args.unresponsive, prober=GrpcProber())
            start = time.monotonic()
            tasks = [TaskState(f"worker:{i}", "worker", a, started_at=start, running=True)
                     for i, a in enumerate(addresses)]
            monitor.tick(tasks)
            while not all(monitor.answered(t.name, start) for t in tasks):
                time.sleep(0.05)
            time.sleep(PROBE_PERIOD * (len(detections) + 1) / (args.runs + 1))  # any phase
            os.killpg(proc.pid, signal.SIGSTOP)
            frozen = time.monotonic()
            while monitor.tick(tasks) is None:
                time.sleep(0.05)
            detections.append(time.monotonic() - frozen)
            monitor.close()
            os.killpg(proc.pid, signal.SIGCONT)
        print(f"detection of a frozen task, unresponsive {args.unresponsive:g}s: "
              + ", ".join(f"{d:.1f}s" for d in detections)
              + f" (max {max(detections):.1f}s; goal <= {args.unresponsive + 5:g}s)")
    finally:
        prober.close()
        os.killpg(proc.pid, signal.SIGCONT)
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
    return 0


if __name__ == "__main__":
    sys.exit(main())
