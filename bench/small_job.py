"""The small job's fixed cost: `launch` of 5 trivial Python tasks against a shell script that
starts and waits for the same 5, and where the launcher's time goes, by phase.

Two parts (docs/benchmarks.md, "The small job"):

- compare: chief + 4 workers, each a Python process that stamps /proc/uptime as it starts
  and ends (``python -S -c``: no site-packages, as small as a Python task gets), under
  `launch --quiet` of this checkout, of ``--before TREE`` (another checkout, e.g. a
  worktree of main before a change), the Python floor (the least a Python launcher does:
  read the spec, set each task's TF_CONFIG, start the five, wait; no check, no record),
  and a shell script (`&` five times, `wait`). Rounds
  alternate the kinds (A B C, C B A, ...); medians and the ratio to the shell. Wall:
  from exec to exit; every task started after; exit after the last task's end; CPU (the
  launcher's and the tasks', RUSAGE_CHILDREN of a fresh runner); `launch --help`.
- phases: the same job, `launch` run in a harness process that stamps, on the
  monotonic clock shared with its parent, when each of the launcher's steps begins and
  ends (the functions named in PHASES, wrapped; those a tree does not have are left out):
  interpreter start (exec to the harness's first line), imports, spec and plan, the
  environment checks, the lease, the pre-checks and the GPU probe, the watchdog, the state
  writes, the tasks' start, the monitors, the wait for the last exit, the closing lines,
  and from the harness's return to the process's exit. Medians over the rounds; each
  tree's phases in its own column.

    .venv/bin/python bench/small_job.py [--rounds 9] [--before TREE] [--parts compare phases]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from bytecode import with_bytecode

REPO = Path(__file__).resolve().parents[1]
STAMP = ("import os;d=os.environ['STAMPS']+'/'+os.environ['TFCLUSTER_TASK'].replace(':','-');"
         "u=lambda:open('/proc/uptime').read().split()[0];open(d+'.s','w').write(u());"
         "open(d+'.e','w').write(u())")
TASKS = ["chief:0", *(f"worker:{i}" for i in range(4))]

MEASURE = r"""
import resource, subprocess, sys
subprocess.run(sys.argv[1:], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
r = resource.getrusage(resource.RUSAGE_CHILDREN)
print(r.ru_utime + r.ru_stime)
"""

# the harness: argv = TREE T0 OUT LAUNCH-ARGS...; stamps (label, begin, end) on the monotonic
# clock (system-wide: the parent's T0 is comparable) into OUT as JSON
HARNESS = r"""
import json, sys, time
t_first = time.monotonic()
tree, t0, out = sys.argv[1], float(sys.argv[2]), sys.argv[3]
sys.path.insert(0, tree)
spans = []
def wrap(owner, attr, label):
    fn = getattr(owner, attr, None)
    if fn is None:
        return
    def timed(*a, **k):
        b = time.monotonic()
        try:
            return fn(*a, **k)
        finally:
            spans.append((label, b - t0, time.monotonic() - t0))
    setattr(owner, attr, timed)
import importlib
import launcher.cli as cli
t_imported = time.monotonic()
for path, attr, label in json.loads(sys.argv[4]):
    mod, _, cls = path.partition(":")
    try:
        owner = importlib.import_module(mod)
    except ImportError:
        continue
    if cls:
        owner = getattr(owner, cls, None)
    if owner is not None:
        wrap(owner, attr, label)
t_patched = time.monotonic()
def record():
    json.dump({"first": t_first - t0, "imported": t_imported - t0, "end": time.monotonic() - t0,
               "patched": t_patched - t0, "spans": spans}, open(out, "w"))
exit_now = getattr(cli, "_exit_now", None)
if exit_now is not None:      # a tree that ends its process inside main(): record first
    def recorded(status):
        record()
        exit_now(status)
    cli._exit_now = recorded
sys.argv = ["launch", *sys.argv[5:]]
status = cli.main()       # as the `launch` script calls it
record()
sys.exit(status)
"""

# The least a Python launcher does, for the "python floor" row: read the spec, give each
# task its TF_CONFIG, start them all, wait for them. No check, no record, no watchdog.
FLOOR = r"""
import json, os, subprocess, sys
spec = json.load(open(sys.argv[1]))
tasks = [(r, i) for r, n in spec["cluster"].items() for i in range(n)]
cluster = {r: [f"localhost:{20000 + k}" for k, (o, _) in enumerate(tasks) if o == r]
           for r in spec["cluster"]}
procs = [subprocess.Popen(spec["command"], stdin=subprocess.DEVNULL, env=dict(
    os.environ, **spec.get("env", {}), TFCLUSTER_TASK=f"{r}:{i}",
    TF_CONFIG=json.dumps({"cluster": cluster, "task": {"type": r, "index": i}})))
    for r, i in tasks]
sys.exit(max(p.wait() for p in procs))
"""

# (module[:class], function, phase)
PHASES = [
    ("launcher.api", "prepare", "spec and backend"),
    ("launcher.backends.environment", "check_fsspec_driver", "environment checks"),
    ("launcher.backends.environment", "check_run_dir", "environment checks"),
    ("launcher.api", "check_lease", "lease"),
    ("launcher.api", "make_plan", "plan"),
    ("launcher.records.registry", "open_state", "state writes"),
    ("launcher.records.registry:RunState", "attach", "state writes"),
    ("launcher.records.registry:RunState", "finish", "state writes"),
    ("launcher.records.plan_file", "write_plan", "state writes"),
    ("launcher.backends.local:LocalBackend", "preflight", "pre-checks"),
    ("launcher.gpus", "place", "GPU probe"),
    ("launcher.backends.storage_check", "preflight_model_dir", "pre-checks"),
    ("launcher.records.run_record:RunRecord", "take_lease", "lease"),
    ("launcher.records.lease:Lease", "release", "lease"),
    ("launcher.backends.watchdog:Watchdog", "__init__", "watchdog"),
    ("launcher.backends.watchdog:Watchdog", "close", "watchdog"),
    ("launcher.tasks:Tasks", "start_all", "tasks' start (queued)"),
    ("launcher.api:Run", "watch", "monitors built"),
    ("launcher.job:Job", "run", "job loop"),
    ("launcher.api:Run", "close", "closing lines"),
]


def uptime() -> float:
    with open("/proc/uptime") as f:
        return float(f.read().split()[0])


def spec_of(work: Path) -> Path:
    doc = {"name": "small", "cluster": {"chief": 1, "worker": 4},
           "command": [sys.executable, "-S", "-c", STAMP],
           "env": {"STAMPS": str(work / "stamps")},
           "model_dir": str(work / "model"), "run_dir": str(work / "runs")}
    path = work / "spec.json"
    path.write_text(json.dumps(doc))
    return path


def shell_of(work: Path) -> Path:
    lines = [f"export STAMPS={work / 'stamps'}"]
    for name in TASKS:
        lines.append(f"TFCLUSTER_TASK={name} {sys.executable} -S -c \"{STAMP}\" &")
    lines.append("wait")
    path = work / "shell.sh"
    path.write_text("\n".join(lines) + "\n")
    return path


def launch_argv(tree: Path) -> list[str]:
    return [sys.executable, "-c", "import sys; sys.path.insert(0, sys.argv.pop(1)); "
            "from launcher.cli import main; sys.exit(main())", str(tree)]


def one(kind: str, tree: Path | None) -> dict:
    """One run of ``kind``: a tree's `launch`, or (``tree`` None) the shell script or the
    Python floor."""
    with tempfile.TemporaryDirectory(prefix="small-") as tmp:
        work = Path(tmp)
        (work / "stamps").mkdir()
        if tree is not None:
            argv = [*launch_argv(tree), str(spec_of(work)), "--quiet"]
        elif kind == "python floor":
            argv = [sys.executable, "-c", FLOOR, str(spec_of(work))]
        else:
            argv = ["sh", str(shell_of(work))]
        t0 = uptime()
        out = subprocess.run([sys.executable, "-c", MEASURE, *argv], capture_output=True,
                             text=True, check=True)
        t1 = uptime()
        starts = [float(p.read_text()) for p in (work / "stamps").glob("*.s")]
        ends = [float(p.read_text()) for p in (work / "stamps").glob("*.e")]
    assert len(starts) == len(ends) == len(TASKS), f"{kind}: {len(starts)} tasks ran"
    return {"wall": t1 - t0, "started": max(starts) - t0, "exit_after": t1 - max(ends),
            "cpu": float(out.stdout)}


def help_time(tree: Path) -> float:
    t0 = time.perf_counter()
    subprocess.run([*launch_argv(tree), "--help"], stdout=subprocess.DEVNULL, check=True)
    return time.perf_counter() - t0


def compare(kinds: dict[str, Path | None], rounds: int) -> None:
    got: dict[str, list[dict]] = {k: [] for k in kinds}
    helps: dict[str, list[float]] = {k: [] for k, t in kinds.items() if t is not None}
    for r in range(rounds):
        for kind in (list(kinds) if r % 2 == 0 else list(kinds)[::-1]):
            got[kind].append(one(kind, kinds[kind]))
            if kind in helps:
                helps[kind].append(help_time(kinds[kind]))
    shell = statistics.median(x["wall"] for x in got["shell"])
    print(f"5 trivial Python tasks, medians of {rounds} rounds, kinds alternating\n")
    print("| | wall s | ratio to the shell | every task started after s | exit after the "
          "last end s | CPU s (with the tasks') | `launch --help` s |")
    print("|---|---|---|---|---|---|---|")
    for kind, runs in got.items():
        m = {f: statistics.median(x[f] for x in runs) for f in runs[0]}
        h = f"{statistics.median(helps[kind]):.3f}" if kind in helps else ""
        print(f"| {kind} | {m['wall']:.3f} | {m['wall'] / shell:.2f}x | {m['started']:.3f} | "
              f"{m['exit_after']:.3f} | {m['cpu']:.2f} | {h} |")
    sys.stdout.flush()


def one_phases(tree: Path) -> dict[str, float]:
    with tempfile.TemporaryDirectory(prefix="small-") as tmp:
        work = Path(tmp)
        (work / "stamps").mkdir()
        out = work / "phases.json"
        t0 = time.monotonic()
        subprocess.run([sys.executable, "-c", HARNESS, str(tree), str(t0), str(out),
                        json.dumps(PHASES), str(spec_of(work)), "--quiet"],
                       stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=True)
        t_exit = time.monotonic() - t0
        doc = json.loads(out.read_text())
        up0 = uptime() - (time.monotonic() - t0)        # launch's t0 on /proc/uptime
        starts = [float(p.read_text()) - up0 for p in (work / "stamps").glob("*.s")]
        ends = [float(p.read_text()) - up0 for p in (work / "stamps").glob("*.e")]
    phases: dict[str, float] = {"interpreter start": doc["first"],
                                "imports (launcher.cli)": doc["imported"] - doc["first"],
                                "imports (the modules of the phases below)":
                                    doc.get("patched", doc["imported"]) - doc["imported"]}
    job = [s for s in doc["spans"] if s[0] == "job loop"]
    inner = ("monitors built", "tasks' start (queued)", "job loop")
    for label, begin, end in doc["spans"]:
        if label in inner:
            continue
        if job and begin >= job[0][1] and end <= job[0][2]:
            label = f"(inside the job loop: {label})"
        phases[label] = phases.get(label, 0.0) + end - begin
    if job:
        _, begin, end = job[0]
        phases["job loop: to the last task's start"] = max(starts) - begin
        phases["job loop: last task's end to the loop's end"] = end - max(ends)
        built = [s for s in doc["spans"] if s[0] == "monitors built"]
        if built:
            phases["(inside: monitors built)"] = built[0][2] - built[0][1]
    phases["after the job (to the harness's return)"] = doc["end"] - max(
        s[2] for s in doc["spans"])
    top = [(b, e) for label, b, e in doc["spans"]
           if label not in inner[:2] and not (job and b >= job[0][1] and e <= job[0][2])]
    phases["other (the main thread between these)"] = doc["end"] - doc.get(
        "patched", doc["imported"]) - sum(e - b for b, e in _outermost(top))
    phases["interpreter exit"] = t_exit - doc["end"]
    phases["total (exec to exit)"] = t_exit
    return phases


def _outermost(spans: list[tuple[float, float]]) -> list[tuple[float, float]]:
    """The spans not inside another (a phase's function calling another's)."""
    return [(b, e) for b, e in spans
            if not any(ob <= b and e <= oe and (ob, oe) != (b, e) for ob, oe in spans)]


def phases_part(kinds: dict[str, Path], rounds: int) -> None:
    got: dict[str, list[dict[str, float]]] = {k: [] for k in kinds}
    for r in range(rounds):
        for kind in (list(kinds) if r % 2 == 0 else list(kinds)[::-1]):
            got[kind].append(one_phases(kinds[kind]))
    labels = list(dict.fromkeys(label for runs in got.values() for p in runs for label in p))
    print(f"\nphases of one `launch` (wall ms, medians of {rounds} rounds)\n")
    print("| phase | " + " | ".join(kinds) + " |")
    print("|---|" + "---|" * len(kinds))
    for label in labels:
        cells = []
        for kind in kinds:
            values = [p[label] for p in got[kind] if label in p]
            cells.append(f"{statistics.median(values) * 1000:.0f}" if values else "-")
        print(f"| {label} | " + " | ".join(cells) + " |")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=9)
    parser.add_argument("--before", type=Path, help="another checkout to run beside this one")
    parser.add_argument("--parts", nargs="+", default=["compare", "phases"])
    args = parser.parse_args()
    trees = {**({"before": args.before.resolve()} if args.before else {}), "launch": REPO}
    with_bytecode(*trees.values())
    with open("/proc/loadavg") as f:
        load = f.read().split()[0]
    print(f"{time.strftime('%Y-%m-%d %H:%M')} UTC, {os.cpu_count()} cores (shared machine), "
          f"load average {load}\n")
    if "compare" in args.parts:
        compare({**trees, "python floor": None, "shell": None}, args.rounds)
    if "phases" in args.parts:
        phases_part(trees, args.rounds)
    with open("/proc/loadavg") as f:
        print(f"\nload average at the end: {f.read().split()[0]}")


if __name__ == "__main__":
    main()
