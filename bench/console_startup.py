"""The console's cost: `launch --help` time and memory, and the launcher's peak memory
(RSS) through a short job of 5 tasks, off a terminal (plain lines) and on a pseudo-terminal
(the live view), for this checkout against an earlier revision of it. Rounds alternate
the two trees so both see the same machine load; medians are reported.

    .venv/bin/python bench/console_startup.py --before REV [--rounds 7]

REV is extracted with `git archive` into a temporary directory; both trees run with this
Python (the same installed packages), each from its own directory with PYTHONPATH set to
it (`python -m launcher.cli`: the working directory comes first on sys.path).
"""

from __future__ import annotations

import argparse
import json
import os
import pty
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent


def extract(rev: str, into: Path) -> Path:
    archive = subprocess.run(["git", "-C", str(REPO), "archive", rev], check=True,
                             capture_output=True).stdout
    subprocess.run(["tar", "-x", "-C", str(into)], input=archive, check=True)
    return into


def timed(argv: list[str], tree: Path, terminal: bool = False) -> tuple[float, float]:
    """(wall seconds, peak RSS in MB of the launcher process itself, sampled every 10 ms),
    output thrown away."""
    import psutil

    env = dict(os.environ, PYTHONPATH=str(tree), TERM="xterm-256color")
    t0 = time.perf_counter()
    fd = None
    if terminal:
        pid, fd = pty.fork()
        if pid == 0:
            os.chdir(tree)      # `python -m` puts the working directory first on sys.path
            os.execve(argv[0], argv, env)
        os.set_blocking(fd, False)
    else:
        with open(os.devnull, "wb") as null:
            pid = subprocess.Popen(argv, env=env, stdout=null, stderr=null, cwd=tree,
                                   stdin=subprocess.DEVNULL).pid
    proc, peak = psutil.Process(pid), 0
    while True:
        try:    # from the exec on: before it, a forked child is a copy of this process
            if proc.cmdline()[1:] == argv[1:]:
                peak = max(peak, proc.memory_info().rss)
        except psutil.Error:
            pass
        if fd is not None:
            try:
                while os.read(fd, 65536):
                    pass
            except OSError:
                pass
        done, _ = os.waitpid(pid, os.WNOHANG)
        if done:
            break
        time.sleep(0.01)
    if fd is not None:
        os.close(fd)
    return time.perf_counter() - t0, peak / 2**20


def job_spec(work: Path) -> Path:
    spec = {"name": "bench", "cluster": {"chief": 1, "worker": 4},
            "command": ["sh", "-c", "echo step 1; sleep 0.3; echo done"],
            "model_dir": str(work / "model"), "run_dir": str(work / "runs"),
            "timeouts": {"kill": 1}}
    path = work / "spec.json"
    path.write_text(json.dumps(spec))
    return path


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--before", required=True, help="the git revision to compare with")
    p.add_argument("--rounds", type=int, default=7)
    args = p.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        before = Path(tmp, "before")
        before.mkdir()
        trees = {"before": extract(args.before, before), "after": REPO}
        spec = job_spec(Path(tmp))
        cases = {"launch --help": ([sys.executable, "-m", "launcher.cli", "--help"], False),
                 "job of 5 tasks, plain": ([sys.executable, "-m", "launcher.cli", str(spec)],
                                           False),
                 "job of 5 tasks, terminal": ([sys.executable, "-m", "launcher.cli",
                                               str(spec)], True)}
        results: dict[tuple[str, str], list[tuple[float, float]]] = {}
        for _ in range(args.rounds + 1):          # the first round warms up, not counted
            for case, (argv, terminal) in cases.items():
                for name, tree in trees.items():
                    results.setdefault((case, name), []).append(timed(argv, tree, terminal))
        print("| case | before wall | after wall | before peak RSS | after peak RSS |")
        print("|---|---|---|---|---|")
        for case in cases:
            row = [case]
            walls = {n: statistics.median(w for w, _ in results[(case, n)][1:]) for n in trees}
            rss = {n: statistics.median(r for _, r in results[(case, n)][1:]) for n in trees}
            row += [f"{walls['before'] * 1000:.0f} ms", f"{walls['after'] * 1000:.0f} ms",
                    f"{rss['before']:.1f} MB", f"{rss['after']:.1f} MB"]
            print("| " + " | ".join(row) + " |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
