"""Fault campaign: kill -9 parts of real TensorFlow jobs at seeded random moments, many times,
and check every run ends well. Run by hand (minutes per run on 2 cores):

    .venv/bin/python bench/fault_campaign.py --runs 20 --seed 1

Jobs: tests/faults/jobs/estimator_job.py (Estimator, TF 2.15: chief, worker, ps, evaluator)
and tests/faults/jobs/pss_job.py (ParameterServerStrategy, TF 2.21: chief, worker, ps).
Targets, in turn: worker, ps, chief, evaluator (Estimator only), the launcher itself (then
the same spec is launched again and must go on from the newest checkpoint), a ps killed
twice under ``max_restarts: 1`` (the run must fail clearly: restart budget spent), and
SIGSTOP of a ps, a worker and the chief (``stop-ps:0``...: alive but silent; the launcher
must name it after ``timeouts.unresponsive``, kill it and restart per policy). For a frozen
task the row also gives the detection time: from the SIGSTOP to the launcher's line
"... has not answered TensorFlow's gRPC for N s".

With ``--ssh`` (root; tests/infra/netns_hosts.py), the campaign runs instead the network
partition of an ssh host: an Estimator job across three hosts (ps on h1, chief on h2,
worker on h3), the link of the target's host brought down mid-training, and up again
``--cut`` seconds later (``partition-ps:0``, ``partition-worker:0``). Rows give the time to
detection (the ``task_unresponsive`` event), what the job did, and the seconds until
nothing was left on any host once the link was back and `launch` had ended.

Damaged run records and model_dir (``--records``): an Estimator job whose run_dir
(a 4 MB tmpfs) is filled to the last byte mid-training (``run-dir-full``), whose run_dir is
removed mid-training (``run-dir-removed``), and a second ``launch`` of the same spec while
the first trains (``lease-contention``: it must be refused in one line, exit 2, and start
nothing). With ``--docker`` (root; tests/infra/docker_engine.py: a private engine, the
image built on it), an Estimator job on the docker backend whose worker container is
killed ``--kills`` times in a row (each time as soon as its next container runs).

Every row also counts what must never happen: a hang, a process or container left behind,
a traceback in the launcher's output, and a checkpoint lost or mixed (the ``checkpoint``
state file names a checkpoint whose files are gone).

A run survived when: the launcher exited 0, the newest complete checkpoint is readable by
TensorFlow and at or past max_steps, each kill cost at most one checkpoint interval (plus
the reporting granularity), training resumed after each kill of a ps, chief or launcher
(a restarted worker or evaluator may find training already finished: shown as "-"), and no
process was left behind. Prints one row per run and a summary, and writes every row as
JSON (--json).
"""

from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests" / "faults"))

from harness import (  # noqa: E402
    JOBS,
    PY_TF215,
    PY_TF221,
    Kill,
    LaunchRun,
    detected_in,
    job_spec,
    lost_steps,
    newest_checkpoint,
    resumed_after,
    summary_reason,
    write_spec,
)

MAX_STEPS, SAVE_STEPS, SLACK = 600, 100, 10
UNRESPONSIVE = 10
FROZEN = ["stop-ps:0", "stop-worker:0", "stop-chief:0"]
SCENARIOS = {
    "estimator": ["worker:0", "ps:0", "chief:0", "evaluator:0", "launcher", "ps-budget",
                  *FROZEN],
    "pss": ["worker:0", "ps:0", "chief:0", "launcher", "ps-budget", *FROZEN],
}
PARTITIONS = ["partition-ps:0", "partition-worker:0"]
RECORDS = ["run-dir-full", "run-dir-removed", "lease-contention"]
RUN_DIR_TMPFS = "4m"
RECORD_WAIT = 300.0         # s: a job hung by a fault is called a hang after this
HOST_OF = {"ps:0": 0, "chief:0": 1, "worker:0": 2}      # h1, h2, h3


def one_run(kind: str, scenario: str, rng: random.Random, workdir: Path) -> dict:
    tmp = Path(tempfile.mkdtemp(prefix=f"{kind}-", dir=workdir))
    doc = job_spec(kind, tmp, MAX_STEPS, SAVE_STEPS, evaluator=kind == "estimator")
    doc["timeouts"]["finish"] = 5
    doc["timeouts"]["unresponsive"] = UNRESPONSIVE
    if scenario == "ps-budget":
        doc["restart"]["ps"] = {"policy": "on-failure", "max_restarts": 1, "backoff": 0.5}
        plan = [("ps:0", rng.randint(100, 250)), ("ps:0", rng.randint(300, 450))]
    else:
        plan = [(scenario, rng.randint(int(0.15 * MAX_STEPS), int(0.75 * MAX_STEPS)))]
    spec = write_spec(tmp, doc)
    python = PY_TF215 if kind == "estimator" else PY_TF221
    if scenario == "run-dir-full":
        (tmp / "runs").mkdir()
        subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={RUN_DIR_TMPFS}", "tmpfs",
                        str(tmp / "runs")], check=True)
    started = time.monotonic()
    runs = [LaunchRun(spec)]
    notes: list[str] = []                       # what the launchers said of a record fault
    problems: list[str] = []
    faults: list[str] = []
    for target, step in plan:
        if not runs[-1].wait_for_step(step, timeout=300):
            problems.append(f"never reached step {step} before killing {target}")
            break
        try:
            if target in RECORDS:
                faults.append(f"{target}@{runs[-1].top_step()}")
                said, notes = record_fault(target, tmp, spec)
                problems += said
            elif target.startswith("stop-"):
                runs[-1].freeze(target[len("stop-"):])
            else:
                runs[-1].kill(target)
        except LookupError as e:
            problems.append(str(e))
            break
    teardown = None
    if scenario == "launcher" and not problems:
        runs[0].wait(timeout=30)
        left = runs[0].leftovers(timeout=15)
        teardown = time.monotonic() - runs[0].kills[0].t
        if left:
            problems.append(f"{len(left)} processes outlived the launcher")
        runs.append(LaunchRun(spec))
    wait = RECORD_WAIT if scenario in RECORDS else 600
    status = runs[-1].wait(timeout=wait)
    if status is None:
        problems.append(f"hang: the launcher did not end within {wait:.0f} s")
    if runs[-1].leftovers(timeout=15):
        problems.append("processes left behind")
    problems += never_seen(runs, tmp / "model")
    if scenario == "run-dir-full":
        subprocess.run(["umount", "-l", str(tmp / "runs")], check=False)
    kills = [k for r in runs for k in r.kills]
    detected = [runs[-1].detected(k) for k in kills if k.how == "SIGSTOP"]
    if any(d is None for d in detected):
        problems.append("a frozen task was never named as not answering")
    name, step, error = newest_checkpoint(tmp / "model", python)
    reason = summary_reason(runs[-1])
    resumed = [resumed_after(runs, k) for k in kills]
    lost = [lost_steps(runs, k) for k in kills]
    if scenario == "ps-budget":
        if status != 1 or "restart budget spent" not in reason:
            problems.append(f"expected a clear failure (budget spent), got {status}: {reason}")
        outcome = "failed clearly" if not problems else "BAD"
    else:
        if status != 0:
            problems.append(f"exit status {status}: {reason}")
        for kill, took in zip(kills, resumed):
            # Without its ps, chief or launcher nothing trains: it must come back. A lost
            # worker or evaluator may come back after the others already finished.
            if took is None and kill.target.split(":")[0] in ("ps", "chief", "launcher"):
                problems.append(f"training did not resume after killing {kill.target}")
        if lost and max(lost) > SAVE_STEPS + SLACK:
            problems.append(f"lost {max(lost)} steps (> one checkpoint interval)")
        outcome = "survived" if not problems else "BAD"
    if error:
        problems.append(f"newest checkpoint {name} unreadable: {error}")
        outcome = "BAD"
    if scenario != "ps-budget" and (step is None or step < MAX_STEPS):
        problems.append(f"final checkpoint {name} at step {step} < {MAX_STEPS}")
        outcome = "BAD"
    if scenario in RECORDS:
        notes += [line for line in runs[-1].stderr_text().splitlines()
                          if any(w in line for w in ("run_dir", "dropped", "lease", "disk",
                                                     "space"))]
    return {"kind": kind, "scenario": scenario, "notes": notes,
            "kills": [label(k) for k in kills] + faults, "outcome": outcome,
            "status": status, "final_checkpoint": name, "final_step": step,
            "resumed_s": [None if r is None else round(r, 1) for r in resumed],
            "lost_steps": lost, "teardown_s": None if teardown is None else round(teardown, 1),
            "detected_s": [None if d is None else round(d, 1) for d in detected],
            "duration_s": round(time.monotonic() - started, 1), "problems": problems}


def record_fault(target: str, tmp: Path, spec: Path) -> tuple[list[str], list[str]]:
    """Damage the run's records (or contend for its model_dir) now: (what went wrong,
    what the second launch said)."""
    runs_dir = tmp / "runs"
    if target == "run-dir-full":
        try:
            with open(runs_dir / "filler", "wb") as f:
                while True:
                    f.write(b"\0" * 65536)
                    f.flush()
        except OSError:
            pass                # the tmpfs is full to the last block
        return [], []
    if target == "run-dir-removed":
        shutil.rmtree(runs_dir)
        return [], []
    second = LaunchRun(spec)                    # lease-contention: the same model_dir
    status = second.wait(timeout=120)
    said = second.stderr_text().strip().splitlines()
    notes = [f"second launch: exit {status} after {time.monotonic() - second.started:.1f}s: "
             + " | ".join(said)]
    problems = []
    if status != 2 or len(said) != 1 or "is in use by run" not in said[0]:
        problems.append(f"a second launch on the model_dir was not refused in one line "
                        f"(exit {status}): {' | '.join(said[-3:])}")
    if second.steps() or second.leftovers(timeout=2):
        problems.append("the refused launch started tasks")
    return problems, notes


def never_seen(runs: list[LaunchRun], model_dir: Path) -> list[str]:
    """What must never happen, whatever the fault: a traceback from the launcher, and a
    checkpoint lost or mixed (the state file names one whose files are gone)."""
    problems = []
    if any("Traceback (most recent call last)" in r.stderr_text() for r in runs):
        problems.append("traceback in the launcher's output")
    state = model_dir / "checkpoint"
    if state.exists():
        for line in state.read_text().splitlines():
            if line.startswith("all_model_checkpoint_paths:"):
                name = Path(line.split('"')[1]).name
                if not (model_dir / f"{name}.index").exists():
                    problems.append(f"checkpoint lost or mixed: {name} is listed, its files "
                                    "are gone")
    return problems


def docker_run(rng: random.Random, engine, workdir: Path, kills: int) -> dict:
    """An Estimator job on the docker backend (chief, worker, ps); the worker's container
    is killed ``kills`` times in a row, each time as soon as its next container runs."""
    from docker_support import IMAGE

    from launcher.backends.docker import LABEL, TASK_LABEL

    tmp = Path(tempfile.mkdtemp(prefix="docker-", dir=workdir))
    steps = 6000
    doc = job_spec("estimator", tmp, steps, SAVE_STEPS, sleep=0.05,
                   backend="docker", command=["python", str(JOBS / "estimator_job.py")],
                   docker={"image": IMAGE, "volumes": [f"{tmp}:{tmp}", f"{JOBS}:{JOBS}:ro"]})
    # no back-off: the next container starts at once, under the killed one's name (it
    # doubles per restart otherwise, and 20 restarts would wait minutes)
    doc["restart"]["worker"] = {"policy": "on-failure", "max_restarts": kills + 5,
                                "backoff": 0}
    doc["timeouts"].update(finish=10, unresponsive=UNRESPONSIVE, start=120)
    run = LaunchRun(write_spec(tmp, doc))
    problems: list[str] = []
    done, seen = 0, set()
    if not run.wait_for_step(rng.randint(100, 300), timeout=300):
        problems.append("never trained")
    while done < kills and not problems and run.proc.poll() is None:
        (run_dir,) = (tmp / "runs").iterdir()
        run_id = json.loads((run_dir / "plan.json").read_text())["run_id"]
        ids = engine.lines("ps", "-q", "--no-trunc", "--filter", f"label={LABEL}={run_id}",
                           "--filter", f"label={TASK_LABEL}=worker:0",
                           "--filter", "status=running")
        fresh = [i for i in ids if i not in seen]
        if not fresh:
            time.sleep(0.2)
            continue
        seen.update(fresh)
        engine.docker("kill", fresh[0], check=False)
        done += 1
    if done < kills and not problems:
        problems.append(f"the job ended after {done} kills of {kills}")
    status = run.wait(timeout=900)
    if status is None:
        problems.append("hang: the launcher did not end within 900 s")
    elif status != 0:
        problems.append(f"exit status {status}: {summary_reason(run)}")
    if run.leftovers(timeout=15):
        problems.append("processes left behind")
    left = engine.containers()
    if left:
        problems.append(f"containers left behind: {left}")
    problems += never_seen([run], tmp / "model")
    name, final, error = newest_checkpoint(tmp / "model", PY_TF215)
    if error or final is None or final < steps:
        problems.append(f"final checkpoint {name} at step {final}: {error or 'short'}")
    (run_dir,) = (tmp / "runs").iterdir()
    summary = json.loads((run_dir / "summary.json").read_text()) \
        if (run_dir / "summary.json").exists() else {}
    restarts = {t["task"]: t["restarts"] for t in summary.get("tasks", [])}
    if restarts.get("worker:0") != done:
        problems.append(f"worker:0 restarted {restarts.get('worker:0')} times, killed {done}")
    return {"kind": "docker-estimator", "scenario": f"worker-killed-x{kills}",
            "kills": [f"worker:0 x{done}"], "outcome": "survived" if not problems else "BAD",
            "status": status, "final_checkpoint": name, "final_step": final,
            "resumed_s": [], "lost_steps": [], "detected_s": [], "teardown_s": None,
            "duration_s": round(time.monotonic() - run.started, 1), "problems": problems}


def label(kill: Kill) -> str:
    how = {"SIGKILL": "", "SIGSTOP": "stop-", "partition": "partition-"}[kill.how]
    return f"{how}{kill.target}@{kill.step_before}"


def partition_run(scenario: str, rng: random.Random, bed, workdir: Path, cut: float) -> dict:
    """One Estimator job across the netns hosts; the target's host is cut off mid-training
    for ``cut`` seconds. The default policies apply (a lost ps restarts the cluster)."""
    import subprocess

    target = scenario[len("partition-"):]
    host = bed.hosts[HOST_OF[target]]
    tmp = Path(tempfile.mkdtemp(prefix="partition-", dir=workdir))
    doc = job_spec("estimator", tmp, MAX_STEPS, SAVE_STEPS)
    addr = [h.address for h in bed.hosts]
    doc.update(backend="ssh", cluster={"chief": [addr[1]], "worker": [addr[2]],
                                       "ps": [addr[0]]},
               workdir=str(Path(__file__).resolve().parents[1]), ssh=bed.ssh_section(),
               command=[PY_TF215, "tests/faults/jobs/estimator_job.py"])
    doc["timeouts"].update(finish=5, unresponsive=UNRESPONSIVE, start=60)
    run = LaunchRun(write_spec(tmp, doc))
    problems: list[str] = []
    step = rng.randint(int(0.15 * MAX_STEPS), int(0.5 * MAX_STEPS))
    kill, back, gone_after = None, None, None
    try:
        if run.wait_for_step(step, timeout=300):
            subprocess.run(["ip", "link", "set", host.veth, "down"], check=True)
            kill = Kill(target, time.monotonic(), run.top_step(), "partition")
            run.kills.append(kill)
            time.sleep(cut)
        else:
            problems.append(f"never reached step {step}")
    finally:
        subprocess.run(["ip", "link", "set", host.veth, "up"], check=True)
        back = time.monotonic()
    status = run.wait(timeout=600)
    ended = time.monotonic()
    if status is None:
        problems.append("hang: the launcher did not end within 600 s")
    left = bed.leftovers(timeout=90)
    if left:
        problems.append(f"left on hosts: {left}")
        bed.kill_all()
    else:
        gone_after = time.monotonic() - max(back, ended)
    (run_dir,) = (tmp / "runs").iterdir()
    detected = detected_in(run_dir, kill) if kill else None
    if kill and detected is None:
        problems.append("the cut-off task was never named as not answering")
    resumed = resumed_after([run], kill) if kill else None
    name, final, error = newest_checkpoint(tmp / "model", PY_TF215)
    reason = summary_reason(run)
    outcome = ("survived" if status == 0 else "failed clearly" if status == 1 else "BAD") \
        if not problems else "BAD"
    return {"kind": "ssh-estimator", "scenario": scenario,
            "kills": [label(kill)] if kill else [], "outcome": outcome, "status": status,
            "reason": reason, "final_checkpoint": name, "final_step": final,
            "resumed_s": [None if resumed is None else round(resumed, 1)],
            "lost_steps": [lost_steps([run], kill)] if kill else [],
            "detected_s": [None if detected is None else round(detected, 1)],
            "clean_after_s": None if gone_after is None else round(gone_after, 1),
            "teardown_s": None, "duration_s": round(time.monotonic() - run.started, 1),
            "problems": problems + ([f"checkpoint unreadable: {error}"] if error else [])}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--runs", type=int, default=11)
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--kinds", default="estimator,pss")
    p.add_argument("--only", metavar="SCENARIO", help="one scenario (worker:0, launcher...)")
    p.add_argument("--json", metavar="FILE", help="write every run's row here")
    p.add_argument("--ssh", action="store_true",
                   help="network partitions of ssh hosts in netns (root) instead")
    p.add_argument("--cut", type=float, default=20.0,
                   help="--ssh: seconds the link stays down")
    p.add_argument("--records", action="store_true",
                   help="run_dir filled, run_dir removed, model_dir lease contention "
                        "(Estimator; root for the tmpfs) instead")
    p.add_argument("--docker", action="store_true",
                   help="a docker worker killed --kills times in a row (root) instead")
    p.add_argument("--kills", type=int, default=20, help="--docker: kills in a row")
    args = p.parse_args(argv)
    kinds = args.kinds.split(",")
    order = [(k, s) for k in kinds for s in SCENARIOS[k] if args.only in (None, s)]
    if args.records:
        order = [("estimator", s) for s in RECORDS if args.only in (None, s)]
    workdir = Path(tempfile.mkdtemp(prefix="fault-campaign-"))
    bed = engine = None
    if args.docker:
        sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
        sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests" / "docker"))
        from docker_support import IMAGE
        from infra.docker_engine import start_engine

        engine = start_engine()
        os.environ.update(engine.env())
        print(f"image built in {engine.build(IMAGE, base=engine.base_image()):.0f}s",
              flush=True)
        order = [("docker-estimator", f"worker-killed-x{args.kills}")]
    if args.ssh:
        sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
        from infra.netns_hosts import start_hosts

        bed = start_hosts(workdir / "hosts", count=3)
        order = [("ssh-estimator", s) for s in PARTITIONS if args.only in (None, s)]
    rows = []
    print(f"{'#':>3} {'job':9} {'scenario':13} {'kills (target@step)':28} {'outcome':15} "
          f"{'detected s':10} {'resumed s':10} {'lost':5} {'total s':7}", flush=True)
    for i in range(args.runs):
        kind, scenario = order[i % len(order)]
        rng = random.Random(args.seed * 1000 + i)
        if engine is not None:
            row = docker_run(rng, engine, workdir, args.kills)
        elif bed is not None:
            row = partition_run(scenario, rng, bed, workdir, args.cut)
        else:
            row = one_run(kind, scenario, rng, workdir)
        rows.append(row)
        resumed = ",".join("-" if r is None else f"{r:g}" for r in row["resumed_s"])
        detected = ",".join("-" if d is None else f"{d:g}" for d in row["detected_s"]) or "-"
        print(f"{i:>3} {kind:9} {scenario:13} {' '.join(row['kills']):28} {row['outcome']:15} "
              f"{detected:10} {resumed:10} {max(row['lost_steps'] or [0]):<5} "
              f"{row['duration_s']:<7}"
              + (f"  {'; '.join(row['problems'])}" if row["problems"] else ""), flush=True)
        if args.json:
            Path(args.json).write_text(json.dumps(rows, indent=1))
    survived = sum(r["outcome"] == "survived" for r in rows)
    clear = sum(r["outcome"] == "failed clearly" for r in rows)
    bad = len(rows) - survived - clear
    print(f"\nruns {len(rows)}: survived {survived}, failed clearly (budget spent) {clear}, "
          f"bad {bad}")
    by_target: dict[str, list[float]] = {}
    for r in rows:
        if r["scenario"] == "ps-budget":
            continue
        for kill, resumed in zip(r["kills"], r["resumed_s"]):
            if resumed is not None:
                by_target.setdefault(f"{r['kind']} {kill.split('@')[0]}", []).append(resumed)
    for key, values in sorted(by_target.items()):
        print(f"  {key:30} resumed after: median {statistics.median(values):5.1f}s  "
              f"max {max(values):5.1f}s  (n={len(values)})")
    teardowns = [r["teardown_s"] for r in rows if r["teardown_s"] is not None]
    if teardowns:
        print(f"  launcher killed: every task gone within {max(teardowns):.1f}s (max; checked "
              f"every 0.1s, n={len(teardowns)})")
    for r in rows:
        if r.get("reason") is not None:
            print(f"  {r['scenario']}: exit {r['status']}, {r['reason']}; nothing left on any "
                  f"host {r['clean_after_s']}s after both the link came back and launch ended")
    for what, words in (("hangs", ("hang:",)), ("orphans", ("left behind",)),
                        ("tracebacks", ("traceback",)),
                        ("checkpoints lost or mixed", ("checkpoint lost", "final checkpoint",
                                                       "unreadable"))):
        n = sum(any(w in p for p in r["problems"] for w in words) for r in rows)
        print(f"  {what}: {n} of {len(rows)} runs")
    if bed is not None:
        bed.stop()
    if engine is not None:
        engine.stop()
    return 0 if bad == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
