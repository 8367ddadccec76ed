"""Scale: hundreds of tasks from one launcher, side by side with a shell, in one run.

Three parts (docs/benchmarks.md, "Scale"):

- local: chief + N workers + 2 ps of sleeping tasks under `launch` against a shell script
  that starts and waits for the very same sleeps (the chief sleeps a second longer, so the
  workers end by themselves in both; the ps sleep until they are stopped). Each task
  stamps /proc/uptime as it starts and ends. Reported: wall time, every task started
  after, from the last task's end to the exit, CPU (the launcher's or the shell's and
  every task's, RUSAGE_CHILDREN of a fresh runner) and the launcher's CPU per task (its
  CPU less the shell's), peak RSS, and the start cost per task: from the first task's start
  to the last's, over the tasks, and the most threads the launcher had. Rounds alternate
  launch and shell (and, with --before TREE, the launcher of another checkout, with
  --variants, this one changed: the start pool's size, no setpriv, a slower loop); --burn
  runs CPU-bound processes beside them (2: both cores busy).
- scripted: the real job loop over the in-memory backend (tests/scripted_backend.py), one
  fresh process per size: chief + N workers + N/10 ps over a 600 s job on a fake clock.
  CPU per task to start every task, CPU per task for the whole run, peak RSS.
- monitors: one loop turn's monitor CPU for N running tasks (the coordinator's tick and
  the liveness monitor's tick on the loop's thread; the liveness probe thread's probes of
  tasks that answered once, HTTP/2 PINGs, against N ports of one gRPC server in another
  process; a GetStatus call for comparison), as a share of one core.
- ssh (as root; not in the default parts): N sleeping workers spread over 3 netns hosts
  (tests/infra/netns_hosts.py, each its own sshd), under `launch` of this checkout and,
  with --ssh-baseline REV, of that git revision (exported to a temporary directory),
  alternating in each round. Each task stamps /proc/uptime as it starts and ends.
- slurm (as root, on the beds lock; not in the default parts): N sleeping workers, half on
  each node of a 2-node Slurm bed (tests/infra/slurm_cluster.py), with ``slurm.steps``
  node (one step per node) and task (one step per task, the form before), alternating.
  Each task stamps its start (with its Slurm step id) and end.
- docker (as root; not in the default parts): N sleeping workers, one container each, on a
  private engine (tests/infra/docker_engine.py) from its Debian base image, under `launch`
  of this checkout and, with --before TREE, of that one, alternating: wall, every task
  started after, the start span (first to last), the CPU of the launcher and its docker
  clients per task, peak RSS, the launcher's threads.

    .venv/bin/python bench/scale.py [--sizes 10 100 1000] [--sleep 5] [--rounds 1]
                                    [--parts local scripted monitors ssh slurm]
                                    [--ssh-sizes 10 50 100] [--ssh-baseline REV]
                                    [--ssh-no-storage-check]
                                    [--slurm-sizes 10 50 100]
                                    [--docker-sizes 10 50 100] [--before TREE]
                                    [--burn 0 2] [--ps 2] [--variants ...]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from bytecode import with_bytecode

REPO = Path(__file__).resolve().parents[1]
LAUNCH = str(Path(sys.executable).parent / "launch")
STAMP = 'read t _ </proc/uptime; echo "$t" >"$STAMPS/$TFCLUSTER_TASK_TYPE-$TFCLUSTER_TASK_INDEX.{}"'
TASK = f"{STAMP.format('s')}; sleep $SLEEP; {STAMP.format('e')}"

# runs argv; prints its CPU (and all it waited for), its largest process's peak RSS and the
# most threads its own process had (/proc/PID/status, sampled every 10 ms)
MEASURE = r"""
import resource, subprocess, sys, threading, time
proc = subprocess.Popen(sys.argv[1:], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
most = [0]
def sample():
    while proc.poll() is None:
        try:
            with open(f"/proc/{proc.pid}/status") as f:
                line = next(x for x in f if x.startswith("Threads:"))
            most[0] = max(most[0], int(line.split()[1]))
        except (OSError, StopIteration, ValueError):
            pass
        time.sleep(0.01)
sampler = threading.Thread(target=sample, daemon=True)
sampler.start()
proc.wait()
r = resource.getrusage(resource.RUSAGE_CHILDREN)
print(r.ru_utime + r.ru_stime, r.ru_maxrss, most[0])
"""
BURN = "while :; do :; done"       # a CPU-bound job: one busy core per copy


def uptime() -> float:
    with open("/proc/uptime") as f:
        return float(f.read().split()[0])


def measured(argv: list[str], env: dict[str, str] | None = None
             ) -> tuple[float, float, float, float, int]:
    """(started at, ended at) on /proc/uptime's clock, CPU seconds of ``argv`` and all it
    waited for, peak RSS (MB) of its largest process, the most threads of its process."""
    t0 = uptime()
    out = subprocess.run([sys.executable, "-c", MEASURE, *argv], capture_output=True,
                         text=True, check=True, cwd=REPO, env=env)
    t1 = uptime()
    cpu, rss_kb, threads = out.stdout.split()
    return t0, t1, float(cpu), int(rss_kb) / 1024, int(threads)


# What may stretch the start of many tasks, each changed alone in `launch` (--variants), to
# measure: the start pool's threads, the exec of setpriv in front of each task, the loop's
# pace (its turn, TURN).
VARIANTS = {
    "pool=1": "import launcher.backends.local as m; m.LocalBackend.start_threads = 1",
    "pool=8": "import launcher.backends.local as m; m.LocalBackend.start_threads = 8",
    "pool=16": "import launcher.backends.local as m; m.LocalBackend.start_threads = 16",
    "no-setpriv": "import launcher.backends.local as m; m.dies_with_parent = lambda a, e: a",
    "turn=0.2": "import launcher.monitors as m; m.TURN = 0.2",    # tick_every reads it
}


def launch_argv(tree: Path, variant: str | None = None) -> list[str]:
    """`launch` of the launcher in ``tree`` (this checkout, or another to compare), changed
    by one of VARIANTS."""
    return [sys.executable, "-c", "import sys; sys.path.insert(0, sys.argv.pop(1)); "
            f"{VARIANTS[variant] if variant else 'pass'}; "
            "from launcher.cli import main; sys.exit(main())", str(tree)]


class Burners:
    """``count`` CPU-bound processes beside the runs (a loaded machine), ended on exit."""

    def __init__(self, count: int):
        self.procs = [subprocess.Popen(["sh", "-c", BURN]) for _ in range(count)]

    def __enter__(self) -> Burners:
        return self

    def __exit__(self, *exc: object) -> None:
        for proc in self.procs:
            proc.kill()
            proc.wait()


def load_average() -> str:
    with open("/proc/loadavg") as f:
        return f.read().split()[0]


PS = 2      # ps of the local part (--ps)


def tasks_of(n: int) -> list[tuple[str, int, float]]:
    """(type, index, extra sleep) of chief + n workers + PS ps; -1: sleeps until stopped."""
    return [*(("ps", i, -1.0) for i in range(PS)), ("chief", 0, 1.0),
            *(("worker", i, 0.0) for i in range(n))]


def local_spec(work: Path, n: int, sleep: float) -> Path:
    doc = {"name": "scale", "cluster": {"chief": 1, "worker": n, "ps": PS},
           "command": ["sh", "-c", TASK], "env": {"STAMPS": str(work / "stamps"),
                                                  "SLEEP": str(sleep)},
           "roles": {"chief": {"env": {"SLEEP": str(sleep + 1)}},
                     "ps": {"env": {"SLEEP": "3600"}}},
           "model_dir": str(work / "model"), "run_dir": str(work / "runs"), "max_steps": 10}
    path = work / "spec.json"
    path.write_text(json.dumps(doc))
    return path


def shell_script(work: Path, n: int, sleep: float) -> Path:
    """Start every task in the background, wait for the chief and the workers, stop the
    ps: what a user's script does."""
    lines = [f"export STAMPS={work / 'stamps'}", f"TASK='{TASK}'", "trainers=''", "ps=''"]
    for type_, index, extra in tasks_of(n):
        secs = 3600 if extra < 0 else sleep + extra
        lines.append(f"TFCLUSTER_TASK_TYPE={type_} TFCLUSTER_TASK_INDEX={index} "
                     f"SLEEP={secs:g} setsid sh -c \"$TASK\" &")
        group = "ps" if type_ == "ps" else "trainers"
        lines.append(f'{group}="${group} $!"')
    lines += ["wait $trainers", "for p in $ps; do kill -TERM -$p; done", "wait"]
    path = work / "shell.sh"
    path.write_text("\n".join(lines) + "\n")
    return path


def one_local(tree: Path | None, n: int, sleep: float, variant: str | None = None) -> dict:
    """One run: `launch` of the launcher in ``tree``, or the shell script (None)."""
    with tempfile.TemporaryDirectory(prefix="scale-") as tmp:
        work = Path(tmp)
        (work / "stamps").mkdir()
        argv = ([*launch_argv(tree, variant), str(local_spec(work, n, sleep)), "--quiet"]
                if tree is not None else ["sh", str(shell_script(work, n, sleep))])
        kind = "launch" if tree is not None else "shell"
        t0, t1, cpu, rss, threads = measured(argv)
        # a stamp is empty when its task was stopped as it wrote it (the end rules stop
        # workers started after the chief's end): it counts, without its time
        started = [p.read_text() for p in (work / "stamps").glob("*.s")]
        starts = [float(t) for t in started if t.strip()]
        ends = [float(t) for p in (work / "stamps").glob("*.e") if (t := p.read_text()).strip()]
    tasks = n + 1 + PS
    if len(started) != tasks:   # the chief ended first: the end rules dropped the rest
        print(f"<!-- {kind}, N = {n}: {len(started)} of {tasks} tasks started -->")
    return {"wall": t1 - t0, "started": max(starts) - t0, "count": len(started),
            "start_ms": (max(starts) - min(starts)) / tasks * 1000,
            "exit_after_last_end": t1 - max(ends) if ends else float("nan"),
            "cpu": cpu, "rss": rss, "threads": threads, "tasks": tasks}


def local(sizes: list[int], sleep: float, rounds: int, before: Path | None = None,
          burn: int = 0, variants: list[str] = ()) -> None:
    """Each size: `launch` (of this checkout and, with ``before``, of that tree; each of
    ``variants``) and the shell, alternating (A B C, C B A, ...); ``burn`` CPU-bound
    processes beside them."""
    trees: dict[str, Path | None] = {**({"before": before} if before else {}),
                                     "launch": REPO, **{v: REPO for v in variants},
                                     "shell": None}
    print(f"local: chief + N workers + {PS} ps sleeping {sleep:g} s (chief {sleep + 1:g} s), "
          f"medians of {rounds} round(s), {', '.join(trees)} alternating; "
          f"{burn} CPU-bound process(es) beside them; load average {load_average()}\n")
    print("| N workers | | wall s | ratio to the shell | every task started after s | start "
          "ms/task | exit after the last end s | CPU s (with the tasks') | launcher CPU "
          "ms/task | peak RSS MB | launcher threads |")
    print("|---|---|---|---|---|---|---|---|---|---|---|")
    with Burners(burn):
        for n in sizes:
            got: dict[str, list[dict]] = {k: [] for k in trees}
            for r in range(rounds):
                for kind in (list(trees) if r % 2 == 0 else list(trees)[::-1]):
                    got[kind].append(one_local(trees[kind], n, sleep,
                                               kind if kind in VARIANTS else None))
            med = {k: {f: statistics.median(x[f] for x in v) for f in v[0]}
                   for k, v in got.items()}
            shell = med["shell"]
            for kind, m in med.items():
                per_task = f"{(m['cpu'] - shell['cpu']) / m['tasks'] * 1000:.2f}" \
                    if kind != "shell" else ""
                threads = f"{m['threads']:.0f}" if kind != "shell" else ""
                short = "" if m["count"] == m["tasks"] else f" ({m['count']:.0f} started)"
                print(f"| {n} | {kind} | {m['wall']:.2f} | {m['wall'] / shell['wall']:.2f}x | "
                      f"{m['started']:.2f}{short} | {m['start_ms']:.2f} | "
                      f"{m['exit_after_last_end']:.2f} | {m['cpu']:.2f} | {per_task} | "
                      f"{m['rss']:.0f} | {threads} |")
            sys.stdout.flush()
    print(f"\nload average at the end: {load_average()}")


# --------------------------------------------------------------------------- scripted
SCRIPTED = r"""
import json, resource, sys, time, tempfile
from pathlib import Path
sys.path[:0] = [sys.argv[2] + "/tests"]
from scripted_backend import Script, ScriptedBackend, run_job, scripted_registered
from launcher.tasks import Tasks

n = int(sys.argv[1])
ps = max(1, n // 10)
scripts = {"chief:0": [Script(exit_at=600)], **{f"worker:{i}": [Script(exit_at=600)]
                                                for i in range(n)}}
backend = ScriptedBackend(scripts)
starts_cpu = [0.0]
original_start = Tasks.start
def start(self, run):
    c0 = time.process_time()
    original_start(self, run)
    starts_cpu[0] += time.process_time() - c0
Tasks.start = start
with tempfile.TemporaryDirectory() as tmp, scripted_registered():
    c0 = time.process_time()
    result, _ = run_job({"cluster": {"chief": 1, "worker": n, "ps": ps}}, backend, Path(tmp))
    cpu = time.process_time() - c0
assert result.status == 0, result.reason
tasks = n + 1 + ps
print(json.dumps({"tasks": tasks, "start_ms": starts_cpu[0] / tasks * 1000,
                  "run_ms": cpu / tasks * 1000, "cpu": cpu,
                  "rss": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024}))
"""


def scripted(sizes: list[int]) -> None:
    print("\nscripted (in-memory backend, fake clock): chief + N workers + N/10 ps, a 600 s "
          "job\n")
    print("| N workers | tasks | start CPU ms/task | whole run CPU s | CPU ms/task | "
          "peak RSS MB |")
    print("|---|---|---|---|---|---|")
    for n in sizes:
        out = subprocess.run([sys.executable, "-c", SCRIPTED, str(n), str(REPO)],
                             capture_output=True, text=True, cwd=REPO)
        if out.returncode:
            print(out.stderr[-2000:])
            continue
        m = json.loads(out.stdout.strip().splitlines()[-1])
        print(f"| {n} | {m['tasks']} | {m['start_ms']:.3f} | {m['cpu']:.2f} | "
              f"{m['run_ms']:.2f} | {m['rss']:.0f} |")
        sys.stdout.flush()


# --------------------------------------------------------------------------- monitors
SERVER = r"""
import sys, time, grpc
from concurrent import futures
handler = grpc.unary_unary_rpc_method_handler(lambda _request, _context: b"")
server = grpc.server(futures.ThreadPoolExecutor(4))
server.add_generic_rpc_handlers((grpc.method_handlers_generic_handler(
    "tensorflow.WorkerService", {"GetStatus": handler}),))
ports = [server.add_insecure_port("127.0.0.1:0") for _ in range(int(sys.argv[1]))]
server.start()
print(*ports, flush=True)
time.sleep(3600)
"""

def monitors(sizes: list[int], turns: int = 200) -> None:
    """One loop turn's monitor CPU with N running tasks whose TF servers answer."""
    sys.path[:0] = [str(REPO)]
    from launcher.monitors import tick_every
    from launcher.monitors.coordinator import CoordinatorMonitor
    from launcher.monitors.liveness import GrpcProber, LivenessMonitor
    from launcher.monitors.ping import PingProber
    from launcher.output.console import Console
    from orchestrator.coordinator import Coordinator
    from orchestrator.decisions import TaskState

    print("\nmonitors: N running tasks whose gRPC servers answer (another process)\n")
    print("| tasks | coordinator tick µs | liveness tick µs | ticks every s | probe period s | "
          "PING CPU ms/probe | (GetStatus ms/call) | monitors' share of a core |")
    print("|---|---|---|---|---|---|---|---|")

    for n in sizes:
        server = subprocess.Popen([sys.executable, "-c", SERVER, str(n)], stdout=subprocess.PIPE,
                                  text=True)
        ports = [int(p) for p in server.stdout.readline().split()]
        tasks = [TaskState(f"worker:{i}", "worker", f"127.0.0.1:{p}", alive=True,
                           started_at=0.0, running=True) for i, p in enumerate(ports)]
        with tempfile.TemporaryDirectory() as tmp:
            coordinator = CoordinatorMonitor(
                Coordinator(tmp, max_steps=100, poll=1.0, stall=3600, startup=3600),
                Console(open(os.devnull, "w"), open(os.devnull, "w")), None)  # noqa: SIM115
            prober, pinger = GrpcProber(), PingProber()
            liveness = LivenessMonitor(30, prober=prober, pinger=pinger, threaded=False,
                                       startup=3600.0, clock=time.monotonic)
            c0 = time.thread_time()
            for _ in range(turns):
                coordinator.tick(tasks)
            coord_us = (time.thread_time() - c0) / turns * 1e6
            c0 = time.thread_time()
            for _ in range(turns):
                liveness.tick(tasks)
            live_us = (time.thread_time() - c0) / turns * 1e6
            liveness.poll_once()                    # GetStatus: every task answers once
            for w in liveness.liveness._watched.values():
                w.asked_at = None
            prober.ask_all(t.address for t in tasks)     # channels made, then timed
            c0 = time.process_time()
            prober.ask_all(t.address for t in tasks)     # for comparison
            grpc_ms = (time.process_time() - c0) / n * 1000
            c0 = time.process_time()
            liveness.poll_once()                    # PINGs: the steady state
            call_ms = (time.process_time() - c0) / n * 1000
            assert liveness.liveness.not_answering() == [], "a PING was not answered"
            period = liveness.liveness.periods(time.monotonic())[0]
            share = (coord_us + live_us) / 1e6 / tick_every(n) + call_ms / 1000 * n / period
            print(f"| {n} | {coord_us:.0f} | {live_us:.0f} | {tick_every(n):g} | {period:g} | "
                  f"{call_ms:.3f} | {grpc_ms:.3f} | {share * 100:.2f} % |")
            liveness.close()
            coordinator.close()
        server.kill()
        server.wait()
        sys.stdout.flush()


# --------------------------------------------------------------------------- ssh
def ssh_spec(work: Path, bed, n: int, sleep: float, storage_check: bool) -> Path:
    """N workers round-robin over the bed's hosts, each a sleep between two stamps."""
    addresses = [bed.hosts[i % len(bed.hosts)].address for i in range(n)]
    doc = {"name": "scale-ssh", "backend": "ssh", "cluster": {"worker": addresses},
           "command": ["sh", "-c", TASK], "env": {"STAMPS": str(work / "stamps"),
                                                  "SLEEP": str(sleep)},
           "model_dir": str(work / "model"), "run_dir": str(work / "runs"),
           "workdir": str(work), "ssh": bed.ssh_section(python=sys.executable),
           "timeouts": {"start": 120, "kill": 2}, "check_storage": storage_check}
    path = work / "spec.json"
    path.write_text(json.dumps(doc))
    return path


SSH_MEASURE = r"""
import resource, subprocess, sys
done = subprocess.run(sys.argv[1:], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
r = resource.getrusage(resource.RUSAGE_CHILDREN)
print(r.ru_utime + r.ru_stime, done.returncode)
sys.stderr.buffer.write(done.stderr[-3000:])
"""


def one_ssh(bed, tree: Path, n: int, sleep: float, storage_check: bool) -> dict:
    """One `launch` of the launcher in ``tree`` (its PYTHONPATH)."""
    with tempfile.TemporaryDirectory(prefix="scale-ssh-") as tmp:
        work = Path(tmp)
        (work / "stamps").mkdir()
        env = dict(os.environ, PYTHONPATH=str(tree))
        t0 = uptime()
        out = subprocess.run([sys.executable, "-c", SSH_MEASURE, LAUNCH,
                              str(ssh_spec(work, bed, n, sleep, storage_check)), "--quiet"],
                             capture_output=True, text=True, check=True, cwd=work, env=env)
        t1 = uptime()
        cpu, status = out.stdout.split()
        stamps = {kind: [float(text) for p in (work / "stamps").glob(f"*.{kind}")
                         if (text := p.read_text().strip())] for kind in "se"}
    left = bed.leftovers(timeout=10)
    assert not left, f"left on the hosts: {left}"
    if status != "0" or len(stamps["e"]) != n:
        print(f"<!-- {tree}, N = {n}: launch exited {status}, {len(stamps['e'])} of {n} "
              f"tasks ended: {out.stderr.strip()[-1500:]} -->")
    return {"wall": t1 - t0, "started": max(stamps["s"]) - t0,
            "exit_after_last_end": t1 - max(stamps["e"], default=t1),
            "cpu_ms": float(cpu) / n * 1000, "ok": float(status == "0")}


def ssh_part(sizes: list[int], sleep: float, rounds: int, baseline: str | None,
             storage_check: bool = True) -> None:
    sys.path[:0] = [str(REPO / "tests")]
    from infra.netns_hosts import missing_prerequisites, netns_hosts

    why = missing_prerequisites()
    if why:
        print(f"\nssh: cannot run: {why}")
        return
    with tempfile.TemporaryDirectory(prefix="scale-ssh-trees-") as trees, \
            tempfile.TemporaryDirectory(prefix="scale-ssh-bed-") as tmp, \
            netns_hosts(tmp, count=3, plain_shell=True) as bed:
        kinds = {"this checkout": REPO}
        if baseline:
            tree = Path(trees) / "baseline"
            tree.mkdir()
            archive = subprocess.run(["git", "-C", str(REPO), "archive", baseline, "launcher",
                                      "orchestrator"], capture_output=True, check=True)
            subprocess.run(["tar", "-x", "-C", str(tree)], input=archive.stdout, check=True)
            kinds = {baseline: tree, **kinds}
        print(f"\nssh: N sleeping workers ({sleep:g} s) over {len(bed.hosts)} netns hosts "
              f"(each its own sshd, an empty root ~/.bashrc), storage check "
              f"{'on' if storage_check else 'off'}, medians of {rounds} round(s), "
              f"alternating\n")
        print("| N workers | launcher | wall s | every task started after s | exit after the "
              "last end s | launcher + ssh clients CPU ms/task | runs ok |")
        print("|---|---|---|---|---|---|---|")
        for n in sizes:
            got: dict[str, list[dict]] = {k: [] for k in kinds}
            for r in range(rounds):
                for kind in (list(kinds) if r % 2 == 0 else list(kinds)[::-1]):
                    got[kind].append(one_ssh(bed, kinds[kind], n, sleep, storage_check))
            for kind, runs in got.items():
                m = {f: statistics.median(x[f] for x in runs) for f in runs[0]}
                print(f"| {n} | {kind} | {m['wall']:.2f} | {m['started']:.2f} | "
                      f"{m['exit_after_last_end']:.2f} | {m['cpu_ms']:.1f} | "
                      f"{sum(r['ok'] for r in runs):.0f}/{len(runs)} |")
            sys.stdout.flush()


# --------------------------------------------------------------------------- slurm
SLURM_TASK = ('read t _ </proc/uptime; echo "$t $SLURM_STEP_ID" >"$STAMPS/$TFCLUSTER_TASK.s"; '
              'sleep $SLEEP; read t _ </proc/uptime; echo "$t" >"$STAMPS/$TFCLUSTER_TASK.e"')


def slurm_spec(work: Path, n: int, sleep: float, steps: str) -> Path:
    """N workers, half on each node of the bed (labels a, b), each a sleep between two
    stamps; the start stamp carries the task's Slurm step id."""
    doc = {"name": "scale-slurm", "backend": "slurm",
           "cluster": {"worker": ["a" if i % 2 == 0 else "b" for i in range(n)]},
           "command": ["sh", "-c", SLURM_TASK], "env": {"STAMPS": str(work / "stamps"),
                                                       "SLEEP": str(sleep)},
           "model_dir": str(work / "model"), "run_dir": str(work / "runs"),
           "workdir": str(work), "check_storage": False,
           "resources": {"default": {"cpus": 0}},
           "slurm": {"partition": "debug", "time": "10", "steps": steps},
           "timeouts": {"start": 300, "kill": 2}}
    path = work / "spec.json"
    path.write_text(json.dumps(doc))
    return path


def one_slurm(cluster, n: int, sleep: float, steps: str) -> dict:
    with tempfile.TemporaryDirectory(prefix="scale-slurm-") as tmp:
        work = Path(tmp)
        (work / "stamps").mkdir()
        env = dict(os.environ, **cluster.env)
        t0 = uptime()
        out = subprocess.run([sys.executable, "-c", SSH_MEASURE, LAUNCH,
                              str(slurm_spec(work, n, sleep, steps)), "--quiet"],
                             capture_output=True, text=True, check=True, cwd=work, env=env)
        t1 = uptime()
        cpu, status = out.stdout.split()
        starts = [p.read_text().split() for p in (work / "stamps").glob("*.s")]
        ends = [float(p.read_text()) for p in (work / "stamps").glob("*.e")]
    if status != "0" or len(ends) != n:
        print(f"<!-- steps {steps}, N = {n}: launch exited {status}, {len(ends)} of {n} "
              f"tasks ended: {out.stderr.strip()[-1500:]} -->")
    # step ids count from 0 in the job: the highest + 1 is every step slurmctld created
    # (the preflight's probe steps included)
    step_ids = {int(s[1]) for s in starts if len(s) > 1}
    return {"wall": t1 - t0, "started": max(float(s[0]) for s in starts) - t0,
            "exit_after_last_end": t1 - max(ends, default=t1),
            "cpu_ms": float(cpu) / n * 1000, "task_steps": len(step_ids),
            "steps": max(step_ids, default=-1) + 1, "ok": float(status == "0")}


def slurm_part(sizes: list[int], sleep: float, rounds: int) -> None:
    """`launch` with ``slurm.steps`` node (one step per node) and task (one step per task,
    the form before), alternating, on a fresh 2-node bed (tests/infra/slurm_cluster.py)."""
    sys.path[:0] = [str(REPO / "tests")]
    from infra.slurm_cluster import SlurmCluster, missing_programs

    if missing_programs() or os.geteuid() != 0:
        print(f"\nslurm: cannot run: needs root and {missing_programs() or 'Slurm'}")
        return
    cluster = SlurmCluster(nodes=2).start()
    try:
        print(f"\nslurm: N sleeping workers ({sleep:g} s), half on each of the bed's 2 nodes "
              f"(slurmd on this machine), medians of {rounds} round(s), alternating\n")
        print("| N workers | slurm.steps | wall s | every task started after s | exit after "
              "the last end s | launcher + srun CPU ms/task | steps running tasks | steps "
              "slurmctld created | runs ok |")
        print("|---|---|---|---|---|---|---|---|---|")
        for n in sizes:
            got: dict[str, list[dict]] = {"task": [], "node": []}
            for r in range(rounds):
                for steps in (list(got) if r % 2 == 0 else list(got)[::-1]):
                    got[steps].append(one_slurm(cluster, n, sleep, steps))
            for steps, runs in got.items():
                m = {f: statistics.median(x[f] for x in runs) for f in runs[0]}
                print(f"| {n} | {steps} | {m['wall']:.2f} | {m['started']:.2f} | "
                      f"{m['exit_after_last_end']:.2f} | {m['cpu_ms']:.1f} | "
                      f"{m['task_steps']:.0f} | {m['steps']:.0f} | "
                      f"{sum(r['ok'] for r in runs):.0f}/{len(runs)} |")
            sys.stdout.flush()
    finally:
        cluster.stop()


# --------------------------------------------------------------------------- docker
def docker_spec(work: Path, image: str, n: int, sleep: float) -> Path:
    """N workers, each a container sleeping between two stamps in a bind-mounted folder
    (model_dir there too: the storage check's probe containers see it)."""
    doc = {"name": "scale-docker", "backend": "docker", "cluster": {"worker": n},
           "command": ["sh", "-c", TASK], "env": {"STAMPS": str(work / "stamps"),
                                                  "SLEEP": str(sleep)},
           "model_dir": str(work / "model"), "run_dir": str(work / "runs"),
           "docker": {"image": image, "volumes": [f"{work}:{work}"]},
           "timeouts": {"start": 300, "kill": 5}}
    path = work / "spec.json"
    path.write_text(json.dumps(doc))
    return path


def one_docker(engine, image: str, tree: Path, n: int, sleep: float) -> dict:
    with tempfile.TemporaryDirectory(prefix="scale-docker-") as tmp:
        work = Path(tmp)
        (work / "stamps").mkdir()
        os.chmod(work / "stamps", 0o777)
        t0, t1, cpu, rss, threads = measured(
            [*launch_argv(tree), str(docker_spec(work, image, n, sleep)), "--quiet"],
            env=dict(os.environ, **engine.env()))
        stamps = {kind: [float(text) for p in (work / "stamps").glob(f"*.{kind}")
                         if (text := p.read_text().strip())] for kind in "se"}
    left = engine.containers()
    if left or len(stamps["e"]) != n:
        print(f"<!-- {tree}, N = {n}: {len(stamps['e'])} of {n} tasks ended; "
              f"containers left: {len(left)} -->")
        engine.remove_all()
    return {"wall": t1 - t0, "started": max(stamps["s"]) - t0,
            "span": max(stamps["s"]) - min(stamps["s"]),
            "exit_after_last_end": t1 - max(stamps["e"], default=t1),
            "cpu_ms": cpu / n * 1000, "rss": rss, "threads": threads}


def docker_part(sizes: list[int], sleep: float, rounds: int, before: Path | None) -> None:
    """`launch` of N sleeping containers on a private engine (tests/infra/docker_engine.py),
    from the Debian base image (python3, no TensorFlow: the containers only sleep)."""
    sys.path[:0] = [str(REPO / "tests")]
    from infra.docker_engine import docker_engine, missing_prerequisites

    why = missing_prerequisites()
    if why:
        print(f"\ndocker: cannot run: {why}")
        return
    trees = {**({"before": before} if before else {}), "launch": REPO}
    with docker_engine() as engine:
        image = engine.base_image()
        print(f"\ndocker: N sleeping workers ({sleep:g} s), one container each, engine "
              f"{engine.driver}, image {image}; medians of {rounds} round(s), "
              f"{', '.join(trees)} alternating; load average {load_average()}\n")
        print("| N containers | launcher | wall s | every task started after s | start span "
              "s (first to last) | exit after the last end s | launcher + docker clients "
              "CPU ms/task | peak RSS MB | launcher threads |")
        print("|---|---|---|---|---|---|---|---|---|")
        for n in sizes:
            got: dict[str, list[dict]] = {k: [] for k in trees}
            for r in range(rounds):
                for kind in (list(trees) if r % 2 == 0 else list(trees)[::-1]):
                    got[kind].append(one_docker(engine, image, trees[kind], n, sleep))
            for kind, runs in got.items():
                m = {f: statistics.median(x[f] for x in runs) for f in runs[0]}
                print(f"| {n} | {kind} | {m['wall']:.2f} | {m['started']:.2f} | "
                      f"{m['span']:.2f} | {m['exit_after_last_end']:.2f} | {m['cpu_ms']:.1f} | "
                      f"{m['rss']:.0f} | {m['threads']:.0f} |")
            sys.stdout.flush()
    print(f"\nload average at the end: {load_average()}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=[10, 100, 1000])
    parser.add_argument("--sleep", type=float, default=5.0)
    parser.add_argument("--rounds", type=int, default=1)
    parser.add_argument("--parts", nargs="+", default=["local", "scripted", "monitors"])
    parser.add_argument("--ssh-sizes", type=int, nargs="+", default=[10, 50, 100])
    parser.add_argument("--slurm-sizes", type=int, nargs="+", default=[10, 50, 100])
    parser.add_argument("--docker-sizes", type=int, nargs="+", default=[10, 50, 100])
    parser.add_argument("--before", type=Path, metavar="TREE",
                        help="local part: also run the launcher of this checkout (another "
                             "worktree), alternating with this one")
    parser.add_argument("--burn", type=int, nargs="+", default=[0],
                        help="local part: once per value, with that many CPU-bound processes "
                             "beside the runs (2: both cores of this machine busy)")
    parser.add_argument("--ps", type=int, default=2, help="local part: ps tasks")
    parser.add_argument("--variants", nargs="+", default=[], choices=sorted(VARIANTS),
                        help="local part: also `launch` changed so (to find what stretches)")
    parser.add_argument("--ssh-baseline", metavar="REV",
                        help="also run the launcher of this git revision (ssh part)")
    parser.add_argument("--ssh-no-storage-check", action="store_true",
                        help="ssh part: check_storage false (no probe per task)")
    args = parser.parse_args()
    global PS
    PS = args.ps
    if shutil.which("setsid") is None:
        sys.exit("bench/scale.py needs setsid (util-linux)")
    with_bytecode(REPO, *([args.before.resolve()] if args.before else []))
    print(f"{time.strftime('%Y-%m-%d %H:%M')} UTC, {os.cpu_count()} cores (shared machine)\n")
    if "local" in args.parts:
        for burn in args.burn:
            local(args.sizes, args.sleep, args.rounds, args.before, burn, args.variants)
    if "scripted" in args.parts:
        scripted(args.sizes)
    if "monitors" in args.parts:
        monitors(args.sizes)
    if "ssh" in args.parts:
        ssh_part(args.ssh_sizes, args.sleep, args.rounds, args.ssh_baseline,
                 not args.ssh_no_storage_check)
    if "slurm" in args.parts:
        slurm_part(args.slurm_sizes, args.sleep, args.rounds)
    if "docker" in args.parts:
        docker_part(args.docker_sizes, args.sleep, args.rounds, args.before)


if __name__ == "__main__":
    main()
